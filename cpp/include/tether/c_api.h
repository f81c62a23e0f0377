/* tether/c_api.h: the C API (C99), for programs and languages that cannot use the C++ API.
 *
 * Handles are opaque and owned by the caller, who frees each with its tether_*_free function
 * (which takes the handle's address and sets it to NULL, so a freed handle cannot be used
 * again by mistake: a NULL handle is refused with TETHER_ERROR_ARGUMENT). Every other function
 * returns a tether_status; on failure, tether_last_error() gives the message, which names what
 * is wrong and where. No C++ exception ever leaves these functions.
 *
 * Lifetimes: a session does not need its model (free the model after compiling); a result
 * does not need its session nor the caller's input buffers (free them in any order). A session
 * may run from several threads at once.
 *
 *   tether_model* model = NULL;
 *   tether_session* session = NULL;
 *   tether_result* result = NULL;
 *   if (tether_model_load("mlp.onnx", &model) != TETHER_OK ||
 *       tether_session_compile(model, NULL, &session) != TETHER_OK) {
 *     fprintf(stderr, "%s\n", tether_last_error());
 *   }
 *   tether_model_free(&model);
 *   float x[2 * 4] = {0};
 *   int64_t dims[2] = {2, 4};
 *   tether_tensor in = {"x", TETHER_DTYPE_FLOAT32, 2, dims, x, sizeof x};
 *   if (tether_session_run(session, &in, 1, &result) == TETHER_OK) {
 *     tether_tensor y;
 *     tether_result_output(result, 0, &y);   // y.name, y.dims, (const float*)y.data
 *   }
 *   tether_result_free(&result);
 *   tether_session_free(&session);
 */
#ifndef TETHER_C_API_H_
#define TETHER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TETHER_C_EXPORT
#else
#define TETHER_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** What a call returned: TETHER_OK, or the kind of error (tether's typed errors, one code each). */
typedef enum tether_status {
  TETHER_OK = 0,
  TETHER_ERROR_ARGUMENT = 1,        /**< a bad argument: NULL, an unknown name, a wrong dtype or size */
  TETHER_ERROR_MODEL = 2,           /**< the model is malformed or inconsistent */
  TETHER_ERROR_MODEL_NOT_FOUND = 3, /**< the model file does not exist or cannot be opened */
  TETHER_ERROR_PARSE = 4,           /**< the bytes are not valid ONNX */
  TETHER_ERROR_GRAPH = 5,           /**< dangling names, duplicates, cycles */
  TETHER_ERROR_EXTERNAL_DATA = 6,   /**< external weights missing or out of bounds */
  TETHER_ERROR_SHAPE = 7,           /**< shapes or element types contradict each other */
  TETHER_ERROR_UNSUPPORTED = 8,     /**< ops, dtypes or attributes the device cannot run */
  TETHER_ERROR_DEVICE = 9,          /**< the device failed (out of device memory, lost device) */
  TETHER_ERROR_MEMORY_LIMIT = 10,   /**< a run would exceed the compile option max_memory */
  TETHER_ERROR_INTERRUPTED = 11,    /**< a run was stopped by its caller */
  TETHER_ERROR_OUT_OF_MEMORY = 12,  /**< host memory ran out */
  TETHER_ERROR_INTERNAL = 13        /**< a bug in tether; the message names the source line */
} tether_status;

/** Element types, numbered as ONNX's TensorProto.DataType (the C++ API's tether::ir::DType). */
enum {
  TETHER_DTYPE_FLOAT32 = 1,
  TETHER_DTYPE_UINT8 = 2,
  TETHER_DTYPE_INT8 = 3,
  TETHER_DTYPE_UINT16 = 4,
  TETHER_DTYPE_INT16 = 5,
  TETHER_DTYPE_INT32 = 6,
  TETHER_DTYPE_INT64 = 7,
  TETHER_DTYPE_BOOL = 9,     /**< one byte per element */
  TETHER_DTYPE_FLOAT16 = 10,
  TETHER_DTYPE_FLOAT64 = 11,
  TETHER_DTYPE_UINT32 = 12,
  TETHER_DTYPE_UINT64 = 13,
  TETHER_DTYPE_BFLOAT16 = 16
};

/** A loaded model. */
typedef struct tether_model tether_model;
/** A model compiled for a device. */
typedef struct tether_session tether_session;
/** The outputs of one run; they stay valid until the result is freed. */
typedef struct tether_result tether_result;

/** Options of tether_session_compile; NULL options mean the defaults of every field. */
typedef struct tether_compile_options {
  const char* device;  /**< "cpu" (NULL too), "vulkan" or "vulkan:N" */
  int32_t threads;     /**< threads for one run; 0: one per physical core */
  int32_t optimize;    /**< nonzero: graph rewrites (folding, fusion) before compiling */
  int64_t max_memory;  /**< bytes one run may take; 0: the machine's physical memory */
} tether_compile_options;

/** Name, element type and shape of a session's input or output. Pointers are valid while the
 *  session lives. */
typedef struct tether_tensor_info {
  const char* name;
  int32_t dtype;         /**< TETHER_DTYPE_*, or another ONNX number (8: string) */
  int64_t rank;          /**< number of dims; -1 when the rank is not known until a run */
  const int64_t* dims;   /**< rank sizes; -1 for a dim known only at run time ("batch") */
} tether_tensor_info;

/** A named, dense, row-major tensor: an input the caller owns (borrowed for the call, never
 *  written), or an output a result owns. */
typedef struct tether_tensor {
  const char* name;
  int32_t dtype;         /**< TETHER_DTYPE_* */
  size_t rank;
  const int64_t* dims;   /**< rank sizes, each >= 0 (may be NULL when rank is 0) */
  const void* data;      /**< the elements (may be NULL when nbytes is 0) */
  size_t nbytes;         /**< bytes at data: the product of dims times the element size */
} tether_tensor;

/** The message of the last call on this thread that failed ("" when none has); valid until the
 *  next failing call on this thread. */
TETHER_C_EXPORT const char* tether_last_error(void);

/** A constant name for a status: "TETHER_OK", "TETHER_ERROR_ARGUMENT", ... ("unknown status"
 *  for a number that is none). */
TETHER_C_EXPORT const char* tether_status_name(tether_status status);

/** tether's version, "MAJOR.MINOR.PATCH". */
TETHER_C_EXPORT const char* tether_version(void);

/** The defaults: device "cpu", threads 0, optimize 1, max_memory 0. */
TETHER_C_EXPORT tether_status tether_compile_options_init(tether_compile_options* options);

/** Loads an ONNX file (external data resolved next to it) into *model.
 *  Errors: MODEL_NOT_FOUND, PARSE, GRAPH, EXTERNAL_DATA, MODEL; ARGUMENT for NULL pointers. */
TETHER_C_EXPORT tether_status tether_model_load(const char* path, tether_model** model);

/** Loads an ONNX model from `size` bytes at `data` (copied where needed: the caller may free
 *  them afterwards). `base_dir` (NULL for none) is the folder of the model's external data.
 *  Errors as tether_model_load. */
TETHER_C_EXPORT tether_status tether_model_load_bytes(const void* data, size_t size, const char* base_dir,
                                                      tether_model** model);

/** Frees *model (NULL allowed) and sets *model to NULL. */
TETHER_C_EXPORT void tether_model_free(tether_model** model);

/** Compiles `model` with `options` (NULL: defaults) into *session. The model is not changed and
 *  may be freed afterwards. Errors: ARGUMENT (unknown device, negative threads or max_memory),
 *  UNSUPPORTED (every node the device cannot run, by name), SHAPE, MODEL, DEVICE. */
TETHER_C_EXPORT tether_status tether_session_compile(const tether_model* model, const tether_compile_options* options,
                                                     tether_session** session);

/** Frees *session (NULL allowed) and sets *session to NULL. Results of its runs stay valid. */
TETHER_C_EXPORT void tether_session_free(tether_session** session);

/** The number of inputs (outputs) of the session. */
TETHER_C_EXPORT tether_status tether_session_input_count(const tether_session* session, size_t* count);
TETHER_C_EXPORT tether_status tether_session_output_count(const tether_session* session, size_t* count);

/** Input (output) number `index`: name, dtype and shape. ARGUMENT when index is out of range. */
TETHER_C_EXPORT tether_status tether_session_input_info(const tether_session* session, size_t index,
                                                        tether_tensor_info* info);
TETHER_C_EXPORT tether_status tether_session_output_info(const tether_session* session, size_t index,
                                                         tether_tensor_info* info);

/** Runs the session on `count` named inputs (any order) and stores the outputs in *result.
 *  Errors: ARGUMENT naming the input for an unknown, missing or repeated name, a wrong dtype or
 *  rank, a dim that contradicts the model, or nbytes that differ from what dtype and dims need;
 *  UNSUPPORTED for string tensors; MEMORY_LIMIT; INTERRUPTED. */
TETHER_C_EXPORT tether_status tether_session_run(const tether_session* session, const tether_tensor* inputs,
                                                 size_t count, tether_result** result);

/** Frees *result (NULL allowed) and sets *result to NULL. */
TETHER_C_EXPORT void tether_result_free(tether_result** result);

/** The number of outputs in the result (the session's outputs, in order). */
TETHER_C_EXPORT tether_status tether_result_count(const tether_result* result, size_t* count);

/** Output number `index` as a tensor whose pointers are valid until the result is freed.
 *  ARGUMENT when index is out of range; UNSUPPORTED for a string output. */
TETHER_C_EXPORT tether_status tether_result_output(const tether_result* result, size_t index, tether_tensor* tensor);

/** The output called `name`; ARGUMENT naming it when the result has no such output. */
TETHER_C_EXPORT tether_status tether_result_find(const tether_result* result, const char* name, tether_tensor* tensor);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TETHER_C_API_H_ */
