#include "tether/error.h"

#include <sstream>

namespace tether::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::ostringstream what;
  what << "tether internal error at " << file << ":" << line << ": check '" << condition << "' failed";
  if (!message.empty()) what << ": " << message;
  throw InternalError(what.str());
}

}  // namespace tether::detail
