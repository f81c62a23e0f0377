// compute_ranges(): one range per group of tensors that share quantization parameters.
#include <map>

#include "tether/quant.h"

namespace tether::quant {

std::map<std::string, TensorRange> compute_ranges(const Plan& plan, const StatsMap& stats, const MethodOptions& method,
                                                  const QuantizeOptions& options) {
  // A group's statistics are its members' merged: one range then covers every member.
  std::map<int, TensorStats> groups;
  for (const Plan::Tensor& t : plan.tensors) {
    auto it = stats.find(t.same_values_as.empty() ? t.name : t.same_values_as);
    if (it == stats.end())
      throw CalibrationError("no statistics for tensor '" + t.name +
                             "': calibrate the tensors the plan lists (Plan::observed()) before computing ranges");
    TensorStats s = it->second;
    s.channel_absmax.clear();  // members may differ in channels; ranges do not use them
    s.channel_axis = -1;
    auto [g, fresh] = groups.emplace(t.group, s);
    if (!fresh) g->second.merge(s);
  }
  std::map<int, TensorRange> chosen;
  for (const auto& [group, s] : groups) {
    std::string used;
    TensorRange r{compute_range(s, method, options.activations, &used), method.method};
    if (method.method == "sqnr") r.method = "sqnr:" + used;
    chosen.emplace(group, r);
  }
  std::map<std::string, TensorRange> out;
  for (const Plan::Tensor& t : plan.tensors) out.emplace(t.name, chosen.at(t.group));
  return out;
}

}  // namespace tether::quant
