// Shape inference for signal processing ops: DFT, STFT, window functions, MelWeightMatrix.
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// A dtype attribute, checked: the output types of generators come from the user.
DType dtype_attr(const InferContext& ctx, const char* name, DType fallback) {
  const int64_t v = ctx.attr_int(name, static_cast<int64_t>(fallback));
  if (v <= 0 || !ir::dtype_is_known(static_cast<int32_t>(v)))
    ctx.fail(std::string("attribute '") + name + "' is not a data type: " + std::to_string(v));
  return static_cast<DType>(v);
}

// A scalar integer input, from a constant or tracked through shape computations.
std::optional<SymInt> scalar_value(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  auto v = ctx.input_values(i);
  if (!v || v->size() != 1) return std::nullopt;
  return v->front();
}

// Bins of a real-input transform of length n: all n, or n / 2 + 1 when onesided.
Dim bins(const Dim& n, bool onesided) {
  if (!onesided) return n;
  return n.is_known() ? Dim(n.value() / 2 + 1) : Dim();
}

void dft(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t rank = x.rank();
  if (rank < 2) ctx.fail("input must have rank >= 2 ([batch, ..., signal, 1 or 2]), got " + x.to_string());
  // The axis is an attribute until opset 17 (default 1) and input 2 from opset 20 (default
  // -2); it counts over the input's dims, the trailing real/imaginary dim included.
  int64_t axis = ctx.attr_int("axis", 1);
  if (ctx.opset() >= 20) {
    axis = -2;
    if (ctx.has_input(2)) {
      auto a = scalar_value(ctx, 2);
      if (!a || !a->known()) {
        ctx.set_output(0, dt, Shape(std::vector<Dim>(rank)));
        return;
      }
      axis = *a->known();
    }
  }
  const size_t a = ctx.axis(axis, rank);
  if (a == rank - 1) ctx.fail("axis " + std::to_string(axis) + " is the trailing real/imaginary dim");
  Dim n = x[a];
  if (ctx.has_input(1)) {
    auto len = scalar_value(ctx, 1);
    n = len && len->negative == 0 ? len->dim : Dim();
  }
  std::vector<Dim> out = x.dims();
  out[a] = bins(n, ctx.attr_int("onesided", 0) != 0);
  out[rank - 1] = Dim(2);
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void stft(InferContext& ctx) {
  // signal (batch, length, 1 or 2) -> (batch, frames, bins, 2).
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (x.has_rank() && x.rank() != 3) ctx.fail("signal must be 3-D (batch, length, 1 or 2), got " + x.to_string());
  Dim frame_length;
  if (auto fl = scalar_value(ctx, 3); fl && fl->negative == 0) frame_length = fl->dim;
  else if (ctx.has_input(2) && ctx.input_shape(2).has_rank() && ctx.input_shape(2).rank() == 1)
    frame_length = ctx.input_shape(2)[0];
  auto step = scalar_value(ctx, 1);
  Dim frames;
  if (x.has_rank() && x[1].is_known() && frame_length.is_known() && step && step->known() && *step->known() > 0) {
    if (frame_length.value() > x[1].value())
      ctx.fail("frame length " + frame_length.to_string() + " exceeds the signal length " + x[1].to_string());
    frames = Dim((x[1].value() - frame_length.value()) / *step->known() + 1);
  }
  const bool real = x.has_rank() && x[2].is_known() && x[2].value() == 1;
  const bool onesided = ctx.attr_int("onesided", 1) != 0 && real;
  ctx.set_output(0, dt, Shape({dim_at(x, 0), frames, bins(frame_length, onesided), Dim(2)}));
}

void window(InferContext& ctx) {
  const DType dt = dtype_attr(ctx, "output_datatype", DType::kFloat32);
  auto size = scalar_value(ctx, 0);
  ctx.set_output(0, dt, Shape({size && size->negative == 0 ? size->dim : Dim()}));
}

void mel_weight_matrix(InferContext& ctx) {
  // (dft_length / 2 + 1, num_mel_bins).
  const DType dt = dtype_attr(ctx, "output_datatype", DType::kFloat32);
  auto mel = scalar_value(ctx, 0);
  auto dft_length = scalar_value(ctx, 1);
  const Dim freq = dft_length && dft_length->known() ? Dim(*dft_length->known() / 2 + 1) : Dim();
  ctx.set_output(0, dt, Shape({freq, mel && mel->negative == 0 ? mel->dim : Dim()}));
}

}  // namespace

void register_signal(Registry& r) {
  r.add("DFT", dft);
  r.add("STFT", stft);
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) r.add(op, window);
  r.add("MelWeightMatrix", mel_weight_matrix);
}

}  // namespace tether::ops
