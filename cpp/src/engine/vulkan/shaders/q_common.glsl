// Included by the INT8 shaders after storage.glsl: 8-bit tensors live in storage buffers as
// bytes (uint8_t, GL_EXT_shader_8bit_storage); whether a byte is int8 or uint8 is a
// specialisation constant of the shader, so one build serves both.
#extension GL_EXT_shader_8bit_storage : require

// A byte's value: int8 (sign-extended) or uint8.
int byte_value(uint raw, bool is_signed) { return is_signed ? (int(raw) ^ 128) - 128 : int(raw); }

// round_half_even(clamp(v, lo, hi)) + zero, as the CPU engine requantizes: a NaN fails both
// comparisons and becomes lo.
int requantize(float v, float lo, float hi, int zero) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return int(roundEven(v)) + zero;
}

uint8_t byte_of(int v) { return uint8_t(uint(v) & 0xffu); }
