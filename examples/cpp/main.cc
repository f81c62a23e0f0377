// Loads an ONNX model, compiles it for the CPU, runs it once on inputs filled with a fixed
// pattern and prints every output. Dims known only at run time ("batch") are taken as 2.
//
//   run_model model.onnx
//
// Output, one line per tensor:  <input|output> <name> <dtype> <d0>x<d1>... <values...>
#include <iomanip>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "tether/tether.h"

using namespace tether;

namespace {

// Element k of every input: exact in float32, the same in the checking script.
float pattern(int64_t k) { return static_cast<float>(k * 7 % 11 - 5) / 4.0f; }

void print(const char* kind, const std::string& name, const ir::Tensor& t) {
  std::cout << kind << " " << name << " " << ir::dtype_name(t.dtype()) << " ";
  for (size_t i = 0; i < t.rank(); ++i) std::cout << (i ? "x" : "") << t.dims()[i];
  if (t.dtype() == ir::DType::kFloat32)
    for (int64_t k = 0; k < t.num_elements(); ++k) std::cout << " " << std::setprecision(9) << t.data<float>()[k];
  std::cout << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " model.onnx\n";
    return 2;
  }
  try {
    ir::Model model = ir::load_model(argv[1]);
    std::unique_ptr<engine::Session> session = engine::compile(model, {.device = "cpu", .threads = 1});

    std::vector<std::pair<std::string, ir::Tensor>> inputs;
    for (const engine::TensorInfo& info : session->inputs()) {
      if (info.dtype != ir::DType::kFloat32) throw ArgumentError("this example fills float32 inputs only");
      std::vector<int64_t> dims;
      for (const ir::Dim& d : info.shape.dims()) dims.push_back(d.is_known() ? d.value() : 2);
      ir::Tensor x = ir::Tensor::zeros(info.dtype, dims);
      for (int64_t k = 0; k < x.num_elements(); ++k) x.mutable_data<float>()[k] = pattern(k);
      print("input", info.name, x);
      inputs.emplace_back(info.name, std::move(x));
    }
    std::vector<ir::Tensor> outputs = session->run(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) print("output", session->outputs()[i].name, outputs[i]);
  } catch (const Error& e) {
    std::cerr << "tether: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
