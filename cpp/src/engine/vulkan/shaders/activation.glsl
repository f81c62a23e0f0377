// Element-wise functions by op code, for standalone unary ops and for activations fused into
// GEMM and convolution. Specialisation constants 1-3 choose the op and its parameters; the
// codes are vulkan::UnaryOp in kernel.h. Needs common.glsl.
layout(constant_id = 1) const uint OP = 0;
layout(constant_id = 2) const float OP_A = 0.0;
layout(constant_id = 3) const float OP_B = 0.0;

// erf: its Maclaurin series below 1 (12 terms: truncation under 1e-9), and above it the
// rational approximation of Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7).
float erf_(float x) {
  float a = abs(x);
  if (a < 1.0) {
    float x2 = x * x, term = x, sum = x;
    for (int n = 1; n < 12; ++n) {
      term *= -x2 / float(n);
      sum += term / float(2 * n + 1);
    }
    return 1.1283791670955126 * sum;
  }
  float t = 1.0 / (1.0 + 0.3275911 * a);
  float poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t;
  float y = 1.0 - poly * exp(-a * a);
  return x < 0.0 ? -y : y;
}

float sigmoid_(float x) { return 1.0 / (1.0 + exp(-x)); }

float softplus_(float x) { return max(x, 0.0) + log(1.0 + exp(-abs(x))); }

// NaN passes through the comparisons: each returns v itself when v is NaN.
float clamp_(float v, float lo, float hi) {
  float t = v < lo ? lo : v;
  return t > hi ? hi : t;
}

float activate(float v) {
  if (OP == 0u) return v;
  if (OP == 1u) return v < 0.0 ? 0.0 : v;                           // Relu
  if (OP == 2u) return v < 0.0 ? OP_A * v : v;                      // LeakyRelu
  if (OP == 3u) return clamp_(v, OP_A, OP_B);                       // Clip
  if (OP == 4u) return sigmoid_(v);                                 // Sigmoid
  if (OP == 5u) return clamp_(OP_A * v + OP_B, 0.0, 1.0);           // HardSigmoid
  if (OP == 6u) return v * clamp_(v / 6.0 + 0.5, 0.0, 1.0);         // HardSwish
  if (OP == 7u) return 0.5 * v * (1.0 + erf_(v * 0.70710678118654752));  // Gelu
  if (OP == 8u) return 0.5 * v * (1.0 + tanh_(0.79788456080286536 * (v + 0.044715 * v * v * v)));  // Gelu tanh
  if (OP == 9u) return v * sigmoid_(v);                             // SiLU
  if (OP == 10u) return tanh_(v);
  if (OP == 11u) return erf_(v);
  if (OP == 12u) return exp(v);
  if (OP == 13u) return log(v);
  if (OP == 14u) return sqrt(v);
  if (OP == 15u) return -v;
  if (OP == 16u) return abs(v);
  if (OP == 17u) return 1.0 / v;                                    // Reciprocal
  if (OP == 18u) return floor(v);
  if (OP == 19u) return ceil(v);
  if (OP == 20u) return softplus_(v);
  if (OP == 21u) return v < 0.0 ? OP_A * (exp(v) - 1.0) : v;        // Elu
  if (OP == 22u) return v <= 0.0 ? OP_B * (OP_A * exp(v) - OP_A) : OP_B * v;  // Selu (alpha, gamma)
  if (OP == 23u) return sin(v);
  if (OP == 24u) return cos(v);
  if (OP == 25u) return isnan(v) ? v : sign(v);  // NaN stays NaN
  if (OP == 26u) return roundEven(v);                               // Round: halves to even
  if (OP == 27u) return v / (1.0 + abs(v));                         // Softsign
  if (OP == 28u) return max(v, 0.0) + min(0.0, OP_A * (exp(v / OP_A) - 1.0));  // Celu
  if (OP == 29u) return v > OP_A ? v : 0.0;                         // ThresholdedRelu
  if (OP == 30u) return v * tanh_(softplus_(v));                    // Mish
  return kNaN;
}
