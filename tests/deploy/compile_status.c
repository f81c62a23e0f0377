/* Loads and compiles one model with the tether library this program is linked against, and
 * prints "ok" or the failure's status name and message (tests/deploy/check_reduced.py reads it).
 *
 *   compile_status model.onnx
 */
#include <stdio.h>

#include "tether/c_api.h"

int main(int argc, char** argv) {
  tether_model* model = NULL;
  tether_session* session = NULL;
  tether_compile_options options;
  tether_status status;

  if (argc != 2) {
    fprintf(stderr, "usage: %s model.onnx\n", argv[0]);
    return 2;
  }
  tether_compile_options_init(&options);
  options.threads = 1;
  status = tether_model_load(argv[1], &model);
  if (status == TETHER_OK) status = tether_session_compile(model, &options, &session);
  if (status == TETHER_OK)
    printf("ok\n");
  else
    printf("%s %s\n", tether_status_name(status), tether_last_error());
  tether_session_free(&session);
  tether_model_free(&model);
  return 0;
}
