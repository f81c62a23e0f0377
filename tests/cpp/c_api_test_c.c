/* Part of c_api_test, compiled as strict C99: tether/c_api.h is valid C, and a C program can
 * load, compile and run a model with it. c_api_test.cc calls the function below and checks
 * what it computed. */
#include <stdio.h>
#include <string.h>

#include "tether/c_api.h"

/* Runs the model in `model_bytes` on x ([batch, 3] float32) and copies the output into y.
 * Returns 0, or 1 with the library's message in `error`. */
int tether_c_api_test_run_from_c(const void* model_bytes, size_t size, const float* x, int64_t batch, float* y,
                                 size_t y_count, char* error, size_t error_size);

int tether_c_api_test_run_from_c(const void* model_bytes, size_t size, const float* x, int64_t batch, float* y,
                                 size_t y_count, char* error, size_t error_size) {
  tether_model* model = NULL;
  tether_session* session = NULL;
  tether_result* result = NULL;
  tether_compile_options options;
  tether_tensor input;
  tether_tensor output;
  int64_t dims[2];
  int failed = 1;

  dims[0] = batch;
  dims[1] = 3;
  input.name = "x";
  input.dtype = TETHER_DTYPE_FLOAT32;
  input.rank = 2;
  input.dims = dims;
  input.data = x;
  input.nbytes = (size_t)batch * 3 * sizeof(float);

  if (tether_model_load_bytes(model_bytes, size, NULL, &model) != TETHER_OK) goto done;
  if (tether_compile_options_init(&options) != TETHER_OK) goto done;
  options.threads = 1;
  if (tether_session_compile(model, &options, &session) != TETHER_OK) goto done;
  tether_model_free(&model);
  if (tether_session_run(session, &input, 1, &result) != TETHER_OK) goto done;
  if (tether_result_output(result, 0, &output) != TETHER_OK) goto done;
  if (output.dtype != TETHER_DTYPE_FLOAT32 || output.nbytes != y_count * sizeof(float)) {
    snprintf(error, error_size, "unexpected output: dtype %d, %zu bytes", (int)output.dtype, output.nbytes);
    failed = 2;
    goto done;
  }
  memcpy(y, output.data, output.nbytes);
  failed = 0;

done:
  if (failed == 1) snprintf(error, error_size, "%s", tether_last_error());
  tether_result_free(&result);
  tether_session_free(&session);
  tether_model_free(&model);
  return failed;
}
