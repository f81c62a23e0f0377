// What the INT8 kernels (quant.cc, quant_gemm.cc, quant_dynamic.cc, quant_shape.cc) share:
// checks of their constant parameters and the 8-bit storage they need. Internal to the Vulkan
// backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/vulkan/kernel.h"

namespace tether::engine::vulkan {

/// int8 or uint8.
bool is_8bit(ir::DType t);

/// The values of an 8-bit zero point tensor as int32; {0} for none.
std::vector<int32_t> zero_point_values(const ir::Tensor* t);

/// "" when `t` is a constant float32 scale whose values are all positive and finite, else
/// why not, naming it `name`.
std::string scale_problem(const ir::Tensor* t, const char* name);

/// "" when input `i` is absent or a constant 8-bit zero point, else why not.
std::string zero_problem(const KernelInit& init, size_t i, const char* name);

/// Throws UnsupportedError naming the node when the recorder's device has no 8-bit storage
/// buffers (the node then runs on the CPU, or strict compile refuses it).
void require_storage8(const Recorder& rec, const ir::Node& node);

/// Registers QLinearMatMul, MatMulInteger, QLinearConv and ConvInteger, and ai.tether
/// MatMulIntegerToFloat and ConvIntegerToFloat (quant_gemm.cc).
void register_quant_gemm(KernelRegistry& r);

/// Registers DynamicQuantizeLinear (quant_dynamic.cc).
void register_quant_dynamic(KernelRegistry& r);

/// Concat, Split, Transpose, Expand and Slice on int8 / uint8 tensors (quant_shape.cc; a Slice
/// with computed bounds takes shape_computed.cc's kernel): the kernels and checks register_quant
/// puts before the word kernels for 8-bit inputs.
std::unique_ptr<Kernel> byte_concat_kernel(const KernelInit& init);
std::unique_ptr<Kernel> byte_transpose_kernel(const KernelInit& init);
std::unique_ptr<Kernel> byte_slice_kernel(const KernelInit& init);
std::unique_ptr<Kernel> byte_split_kernel(const KernelInit& init);
std::unique_ptr<Kernel> byte_expand_kernel(const KernelInit& init);
std::string byte_concat_check(const KernelInit& init);
std::string byte_transpose_check(const KernelInit& init);
std::string byte_slice_check(const KernelInit& init);

}  // namespace tether::engine::vulkan
