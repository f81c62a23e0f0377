// Included by every shader before its declarations: the storage types of its buffers. A
// shader is built twice (cpp/CMakeLists.txt): as it is, and with TETHER_FP16 defined for
// precision "fp16", where float tensors live in memory as float16 (act_t) and data movement
// moves 16-bit words (word_t). Arithmetic is float32 in both (but for gemm_tiled.glsl's
// HALF_PRODUCTS): LD widens what is loaded and ST rounds what is stored (to nearest even; past
// 65504, infinity).
#ifdef TETHER_FP16
#extension GL_EXT_shader_16bit_storage : require
#define act_t float16_t
#define word_t uint16_t
#define LD(v) float(v)
#define ST(v) float16_t(v)
#else
#define act_t float
#define word_t uint
#define LD(v) (v)
#define ST(v) (v)
#endif
