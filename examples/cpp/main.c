/* The C API's version of main.cc: loads an ONNX model, compiles it, runs it once on inputs
 * filled with a fixed pattern and prints every output, in main.cc's format. Dims known only at
 * run time are taken as 2.
 *
 *   run_model_c model.onnx
 */
#include <stdio.h>
#include <stdlib.h>

#include "tether/c_api.h"

#define MAX_INPUTS 16
#define MAX_RANK 8

static void print(const char* kind, const tether_tensor* t) {
  size_t i;
  printf("%s %s %s ", kind, t->name, t->dtype == TETHER_DTYPE_FLOAT32 ? "float32" : "other");
  for (i = 0; i < t->rank; ++i) printf(i ? "x%lld" : "%lld", (long long)t->dims[i]);
  if (t->dtype == TETHER_DTYPE_FLOAT32)
    for (i = 0; i < t->nbytes / sizeof(float); ++i) printf(" %.9g", (double)((const float*)t->data)[i]);
  printf("\n");
}

int main(int argc, char** argv) {
  tether_model* model = NULL;
  tether_session* session = NULL;
  tether_result* result = NULL;
  tether_compile_options options;
  tether_tensor inputs[MAX_INPUTS];
  int64_t dims[MAX_INPUTS][MAX_RANK];
  float* data[MAX_INPUTS] = {NULL};
  size_t n_inputs = 0, n_outputs = 0, i, k;
  int rc = 1;

  if (argc != 2) {
    fprintf(stderr, "usage: %s model.onnx\n", argv[0]);
    return 2;
  }
  tether_compile_options_init(&options);
  options.threads = 1;
  if (tether_model_load(argv[1], &model) != TETHER_OK || tether_session_compile(model, &options, &session) != TETHER_OK ||
      tether_session_input_count(session, &n_inputs) != TETHER_OK)
    goto fail;
  tether_model_free(&model); /* the session keeps what it needs */
  if (n_inputs > MAX_INPUTS) {
    fprintf(stderr, "this example takes at most %d inputs\n", MAX_INPUTS);
    goto done;
  }
  for (i = 0; i < n_inputs; ++i) {
    tether_tensor_info info;
    size_t count = 1;
    if (tether_session_input_info(session, i, &info) != TETHER_OK) goto fail;
    if (info.dtype != TETHER_DTYPE_FLOAT32 || info.rank < 0 || info.rank > MAX_RANK) {
      fprintf(stderr, "input '%s': this example fills float32 inputs of known rank only\n", info.name);
      goto done;
    }
    for (k = 0; k < (size_t)info.rank; ++k) {
      dims[i][k] = info.dims[k] >= 0 ? info.dims[k] : 2;
      count *= (size_t)dims[i][k];
    }
    data[i] = malloc(count * sizeof(float) + 1);
    if (data[i] == NULL) goto done;
    for (k = 0; k < count; ++k) data[i][k] = (float)((long long)(k * 7 % 11) - 5) / 4.0f;
    inputs[i].name = info.name;
    inputs[i].dtype = info.dtype;
    inputs[i].rank = (size_t)info.rank;
    inputs[i].dims = dims[i];
    inputs[i].data = data[i];
    inputs[i].nbytes = count * sizeof(float);
    print("input", &inputs[i]);
  }
  if (tether_session_run(session, inputs, n_inputs, &result) != TETHER_OK ||
      tether_result_count(result, &n_outputs) != TETHER_OK)
    goto fail;
  for (i = 0; i < n_outputs; ++i) {
    tether_tensor out;
    if (tether_result_output(result, i, &out) != TETHER_OK) goto fail;
    print("output", &out);
  }
  rc = 0;
  goto done;

fail:
  fprintf(stderr, "tether: %s\n", tether_last_error());
done:
  for (i = 0; i < MAX_INPUTS; ++i) free(data[i]);
  tether_result_free(&result);
  tether_session_free(&session);
  tether_model_free(&model);
  return rc;
}
