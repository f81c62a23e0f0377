// Shape inference for tether's fused ops (domain ai.tether), which the passes create:
// FusedConv, FusedGemm and FusedMatMul compute what their ONNX op computes, then a bias
// (FusedMatMul) and an activation; their shapes are the ONNX op's.
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

template <const char* kOp>
void as_onnx(InferContext& ctx) {
  // Looked up at call time: the registry is complete by then.
  registry().find("", kOp)(ctx);
}

constexpr char kConv[] = "Conv";
constexpr char kGemm[] = "Gemm";
constexpr char kMatMul[] = "MatMul";

}  // namespace

void register_fused(Registry& r) {
  r.add("FusedConv", as_onnx<kConv>, "ai.tether");
  r.add("FusedGemm", as_onnx<kGemm>, "ai.tether");
  r.add("FusedMatMul", as_onnx<kMatMul>, "ai.tether");
}

}  // namespace tether::ops
