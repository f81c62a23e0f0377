// Einsum: explicit and implicit output, '...' (broadcast like numpy, right-aligned), labels
// repeated within an operand (diagonals), size-1 dims broadcast against their label, any
// number of operands. Operands fold left to right; each fold is one contraction that keeps
// the labels still needed (by the output or a later operand) and sums the others. Sums
// accumulate in double for floats and in int64 for integers.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <type_traits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

constexpr int kEllipsis = -1;     // stands for '...' in a parsed term
constexpr int kEllipsisBase = 256;  // labels of the broadcast dims: 256 + position

struct Equation {
  std::vector<std::vector<int>> inputs;  // letters as their char codes, kEllipsis for '...'
  std::vector<int> output;
  bool explicit_output = false;
};

// Parses an equation; returns "" or what is wrong with it.
std::string parse_equation(const std::string& text, Equation* eq) {
  std::string s;
  for (char c : text)
    if (c != ' ') s += c;
  const size_t arrow = s.find("->");
  eq->explicit_output = arrow != std::string::npos;
  auto parse_term = [](const std::string& t, std::vector<int>* out) -> std::string {
    for (size_t k = 0; k < t.size(); ++k) {
      if (t.compare(k, 3, "...") == 0) {
        if (std::count(out->begin(), out->end(), kEllipsis) > 0) return "term '" + t + "' has two ellipses";
        out->push_back(kEllipsis);
        k += 2;
      } else if (std::isalpha(static_cast<unsigned char>(t[k]))) {
        out->push_back(static_cast<unsigned char>(t[k]));
      } else {
        return std::string("unexpected character '") + t[k] + "' in term '" + t + "'";
      }
    }
    return "";
  };
  const std::string lhs = s.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    eq->inputs.emplace_back();
    if (std::string why = parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start),
                                     &eq->inputs.back());
        !why.empty())
      return why;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (eq->explicit_output) {
    if (std::string why = parse_term(s.substr(arrow + 2), &eq->output); !why.empty()) return why;
    std::set<int> seen;
    for (int l : eq->output)
      if (!seen.insert(l).second) return std::string("output label '") + static_cast<char>(l) + "' appears twice";
  } else {
    // Implicit: '...' if any operand has it, then the labels used once, in character order.
    std::map<int, int> counts;
    bool ellipsis = false;
    for (const auto& t : eq->inputs)
      for (int l : t) {
        if (l == kEllipsis) ellipsis = true;
        else ++counts[l];
      }
    if (ellipsis) eq->output.push_back(kEllipsis);
    for (const auto& [l, n] : counts)
      if (n == 1) eq->output.push_back(l);
  }
  return "";
}

// A tensor seen through labels: one (label, size, stride) per distinct label.
struct Labeled {
  std::vector<int> labels;
  std::vector<int64_t> dims, strides;

  int find(int label) const {
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == label) return static_cast<int>(i);
    return -1;
  }
};

// Offsets (sum of index * stride) of every index over `dims`, in row-major order.
std::vector<int64_t> offsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  std::vector<int64_t> out{0};
  for (size_t d = 0; d < dims.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(dims[d]));
    for (int64_t base : out)
      for (int64_t i = 0; i < dims[d]; ++i) next.push_back(base + i * strides[d]);
    out = std::move(next);
  }
  return out;
}

// result[keep...] = sum over the other labels of a * b. Labels missing from an operand, or of
// size 1 there, broadcast (stride 0). The result is contiguous with labels in `keep` order.
template <typename Acc, typename TA, typename TB>
std::vector<Acc> contract(const RunContext& ctx, const Labeled& a, const TA* pa, const Labeled& b, const TB* pb,
                          const std::vector<int>& keep, const std::map<int, int64_t>& size, Labeled* result) {
  std::vector<int> summed;
  for (const Labeled* t : {&a, &b})
    for (int l : t->labels)
      if (std::find(keep.begin(), keep.end(), l) == keep.end() && std::find(summed.begin(), summed.end(), l) == summed.end())
        summed.push_back(l);
  auto stride_in = [&](const Labeled& t, int l) -> int64_t {
    const int i = t.find(l);
    return i < 0 || t.dims[static_cast<size_t>(i)] == 1 ? 0 : t.strides[static_cast<size_t>(i)];
  };
  auto tables = [&](const std::vector<int>& labels, std::vector<int64_t>* oa, std::vector<int64_t>* ob) {
    std::vector<int64_t> dims, sa, sb;
    for (int l : labels) {
      dims.push_back(size.at(l));
      sa.push_back(stride_in(a, l));
      sb.push_back(stride_in(b, l));
    }
    *oa = offsets(dims, sa);
    *ob = offsets(dims, sb);
    return dims;
  };
  std::vector<int64_t> ra, rb, ka, kb;
  const std::vector<int64_t> dims = tables(keep, &ra, &rb);
  tables(summed, &ka, &kb);
  *result = Labeled{keep, dims, strides_of(dims)};
  std::vector<Acc> out(ra.size());
  const auto k = static_cast<int64_t>(ka.size());
  parallel(ctx, static_cast<int64_t>(ra.size()), std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const TA* x = pa + ra[static_cast<size_t>(r)];
      const TB* y = pb + rb[static_cast<size_t>(r)];
      Acc acc = 0;
      for (int64_t j = 0; j < k; ++j)
        acc += static_cast<Acc>(x[ka[static_cast<size_t>(j)]]) * static_cast<Acc>(y[kb[static_cast<size_t>(j)]]);
      out[static_cast<size_t>(r)] = acc;
    }
  });
  return out;
}

class EinsumKernel final : public HostKernel {
 public:
  explicit EinsumKernel(const KernelInit& init) : name_(init.node.describe()) {
    parse_equation(init.node.attr_string("equation", ""), &eq_);
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    TETHER_CHECK(in.size() == eq_.inputs.size(), "Einsum: operand count differs from the equation's");
    std::map<int, int64_t> size;
    std::vector<Labeled> ops;
    for (size_t i = 0; i < in.size(); ++i) ops.push_back(label(in[i], eq_.inputs[i], ellipsis_rank(in), size, i));
    std::vector<int> output;
    for (int l : eq_.output) {
      if (l != kEllipsis) {
        output.push_back(l);
        continue;
      }
      for (int64_t e = 0; e < ellipsis_rank(in); ++e) output.push_back(kEllipsisBase + static_cast<int>(e));
    }
    for (int l : output)
      if (size.count(l) == 0) size[l] = 1;  // an ellipsis dim no operand has
    dispatch_numeric(in[0].dtype, [&](auto zero) {
      using T = decltype(zero);
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      static const Acc kOne = 1;
      const Labeled scalar;
      Labeled cur;
      std::vector<Acc> data;
      for (size_t i = 0; i < ops.size(); ++i) {
        // Keep what the output or a later operand needs; the last fold writes the output's order.
        std::vector<int> keep = output;
        if (i + 1 < ops.size()) {
          for (size_t j = i + 1; j < ops.size(); ++j)
            for (int l : ops[j].labels)
              if (std::find(keep.begin(), keep.end(), l) == keep.end()) keep.push_back(l);
        }
        Labeled next;
        if (i == 0) data = contract<Acc>(ctx, ops[0], in[0].as<T>(), scalar, &kOne, keep, size, &next);
        else data = contract<Acc>(ctx, cur, data.data(), ops[i], in[i].as<T>(), keep, size, &next);
        cur = std::move(next);
      }
      TETHER_CHECK(cur.dims == out[0].dims, "Einsum: planned output shape differs from the equation's");
      T* y = out[0].as<T>();
      for (size_t k = 0; k < data.size(); ++k) y[k] = static_cast<T>(data[k]);
    });
  }

 private:
  // The largest number of dims an operand's '...' stands for.
  int64_t ellipsis_rank(const std::vector<View>& in) const {
    int64_t e = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const auto& t = eq_.inputs[i];
      if (std::count(t.begin(), t.end(), kEllipsis) > 0)
        e = std::max<int64_t>(e, static_cast<int64_t>(in[i].rank()) - static_cast<int64_t>(t.size()) + 1);
    }
    return e;
  }

  // The operand's dims by label (repeated labels merged into a diagonal, '...' dims given
  // right-aligned broadcast labels); records each label's size, checking that they agree.
  Labeled label(const View& v, const std::vector<int>& term, int64_t ell_rank, std::map<int, int64_t>& size, size_t i) const {
    const bool has_ell = std::count(term.begin(), term.end(), kEllipsis) > 0;
    const auto letters = static_cast<int64_t>(term.size()) - (has_ell ? 1 : 0);
    const auto rank = static_cast<int64_t>(v.rank());
    if (rank < letters || (!has_ell && rank != letters))
      throw ArgumentError(name_ + ": operand " + std::to_string(i) + " has rank " + std::to_string(rank) +
                          ", its equation term has " + std::to_string(letters) + " labels");
    const std::vector<int64_t> st = strides_of(v.dims);
    Labeled t;
    size_t d = 0;
    auto add = [&](int l) {
      const int64_t n = v.dims[d];
      const int at = t.find(l);
      if (at >= 0) {
        if (t.dims[static_cast<size_t>(at)] != n)
          throw ArgumentError(name_ + ": label '" + static_cast<char>(l) + "' repeats in operand " + std::to_string(i) +
                              " with sizes " + std::to_string(t.dims[static_cast<size_t>(at)]) + " and " + std::to_string(n));
        t.strides[static_cast<size_t>(at)] += st[d];
      } else {
        t.labels.push_back(l);
        t.dims.push_back(n);
        t.strides.push_back(st[d]);
      }
      auto [it, fresh] = size.emplace(l, n);
      if (!fresh && it->second != n) {
        if (it->second != 1 && n != 1) {
          const std::string what = l >= kEllipsisBase ? "a '...' dim" : std::string("label '") + static_cast<char>(l) + "'";
          throw ArgumentError(name_ + ": " + what + " is " + std::to_string(it->second) + " in one operand and " +
                              std::to_string(n) + " in operand " + std::to_string(i));
        }
        if (it->second == 1) it->second = n;  // 1 broadcasts to the other size, 0 included
      }
      ++d;
    };
    for (int l : term) {
      if (l != kEllipsis) {
        add(l);
        continue;
      }
      const int64_t own = rank - letters;
      for (int64_t e = 0; e < own; ++e) add(kEllipsisBase + static_cast<int>(ell_rank - own + e));
    }
    return t;
  }

  Equation eq_;
  std::string name_;
};

std::string einsum_check(const KernelInit& init) {
  Equation eq;
  if (std::string why = parse_equation(init.node.attr_string("equation", ""), &eq); !why.empty()) return "equation: " + why;
  if (eq.inputs.size() != init.node.inputs().size())
    return "equation has " + std::to_string(eq.inputs.size()) + " operands, the node " + std::to_string(init.node.inputs().size());
  for (size_t i = 0; i < init.input_types.size(); ++i) {
    const DType t = init.input_dtype(i);
    if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt32 && t != DType::kInt64)
      return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(t)) + "; supported: float32, float64, int32, int64";
    if (t != init.input_dtype(0)) return "inputs 0 and " + std::to_string(i) + " differ in type";
  }
  return "";
}

}  // namespace

void register_einsum(KernelRegistry& r) {
  TETHER_ADD(r, "Einsum",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<EinsumKernel>(i); }, einsum_check);
}

}  // namespace tether::engine::cpu
