// Shape inference for recurrent layers: LSTM, GRU, RNN.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

void recurrent(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const int64_t hidden = ctx.attr_int("hidden_size", -1);
  // R alone holds gates * hidden^2 values: a hidden size past 2^32 cannot be real, and sizes
  // derived from it would overflow.
  if (hidden > (int64_t{1} << 32)) ctx.fail("hidden_size is " + std::to_string(hidden) + "; it must be at most 2^32");
  const std::string direction = ctx.attr_string("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = ctx.attr_int("layout", 0) != 0;
  Dim seq, batch;
  if (x.has_rank()) {
    if (x.rank() != 3) ctx.fail("input must be 3-D, got " + x.to_string());
    seq = x[batch_first ? 1 : 0];
    batch = x[batch_first ? 0 : 1];
  }
  const Dim h = hidden > 0 ? Dim(hidden) : Dim();
  const Dim nd(dirs);
  // W [dirs, gates*h, input], R [dirs, gates*h, h], B [dirs, 2*gates*h], each dim checked when known.
  const std::string& op = ctx.node().op_type();
  const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const Dim gh = hidden > 0 ? Dim(gates * hidden) : Dim();
  const Dim input = x.has_rank() ? x[2] : Dim();
  auto expect = [&](size_t i, const char* name, const std::vector<Dim>& want) {
    if (i >= ctx.num_inputs() || !ctx.has_input(i)) return;
    const Shape& s = ctx.input_shape(i);
    if (!s.has_rank()) return;
    bool ok = s.rank() == want.size();
    for (size_t k = 0; ok && k < want.size(); ++k)
      ok = !(s[k].is_known() && want[k].is_known() && s[k].value() != want[k].value());
    if (!ok) ctx.fail(std::string(name) + " has shape " + s.to_string() + ", expected " + Shape(want).to_string() +
                      " (direction " + direction + ", hidden_size " + std::to_string(hidden) + ")");
  };
  expect(1, "W", {nd, gh, input});
  expect(2, "R", {nd, gh, h});
  expect(3, "B", {nd, hidden > 0 ? Dim(2 * gates * hidden) : Dim()});
  ctx.set_output(0, dt, batch_first ? Shape({batch, seq, nd, h}) : Shape({seq, nd, batch, h}));
  const Shape state = batch_first ? Shape({batch, nd, h}) : Shape({nd, batch, h});
  ctx.set_output(1, dt, state);
  ctx.set_output(2, dt, state);  // LSTM's Y_c
}

}  // namespace

void register_rnn(Registry& r) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) r.add(op, recurrent);
}

}  // namespace tether::ops
