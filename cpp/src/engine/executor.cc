// The executor: the one Session class (engine/executor.h). Placement, steps, plans per input
// shapes, the memory limit, interrupts, profiling and observed values are done here once for
// every backend of a session.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "engine/backends.h"
#include "engine/executor.h"
#include "engine/executor_parts.h"
#include "engine/half.h"
#include "engine/kernel.h"
#include "engine/plan_cache.h"
#include "engine/planner.h"
#include "engine/space.h"
#include "engine/session.h"
#include "ops/constant.h"
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "tether/engine.h"
#include "tether/shape_inference.h"
#include "util/thread_pool.h"

namespace tether::engine::exec {

namespace {

// A channels-last value [N, H, W, C] as the model lays it out, [N, C, H, W]: what observers and
// captures get (they compare intermediates with other runtimes by name).
std::vector<std::byte> channels_first(const void* data, size_t esize, const Dims& d) {
  const int64_t n = d[0], hw = d[1] * d[2], c = d[3];
  std::vector<std::byte> out(static_cast<size_t>(n * hw * c) * esize);
  const auto* src = static_cast<const std::byte*>(data);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t k = 0; k < c; ++k)
        std::memcpy(out.data() + ((i * c + k) * hw + p) * esize, src + ((i * hw + p) * c + k) * esize, esize);
  return out;
}

}  // namespace

Executor::Executor(const ir::Model& model, const CompileOptions& options, std::vector<const Backend*> order,
                   std::shared_ptr<util::ThreadPool> pool)
    : model_(model.clone()),
      order_(std::move(order)),
      pool_(std::move(pool)),
      profile_(options.profile),
      strict_(options.strict),
      max_memory_(memory_limit(options)) {
  std::ostringstream report;
  TETHER_CHECK(!order_.empty(), "a session needs a backend");
  for (const Backend* b : order_) engine_ += (engine_.empty() ? "" : "+") + std::string(b->name());
  for (size_t k = 0; k < order_.size(); ++k) {
    std::unique_ptr<Space> space = order_[k]->open(options);
    if (space == nullptr) continue;
    if (k != 0 || order_.size() < 2)
      throw InternalError("backend '" + std::string(order_[k]->name()) + "' computes in memory of its own: it comes "
                          "first in a session's order, before a backend on host memory");
    space_ = std::move(space);
  }
  // Channels-last forms and fused attention are the CPU engine's: a backend with memory of its own takes the
  // ONNX forms.
  passes::OptimizeOptions passes;
  passes.channels_last = space_ == nullptr;
  // Vulkan has an Attention kernel too, but on the devices measured so far the chain as written (batched
  // GEMMs, Softmax rows) is faster at long queries (docs/vulkan.md, Attention).
  passes.fuse_attention = space_ == nullptr;
  report << prepare_model(model_, options, *order_[space_ != nullptr ? 1 : 0], passes);
  index_values();
  spare_.resize(outputs_.size());
  shape_input_ = find_shape_inputs(model_.graph());
  if (pool_ == nullptr) pool_ = std::make_shared<util::ThreadPool>(options.threads);
  create_steps();
  if (const int64_t freed = release_packed_constants(); freed > 0)
    report << engine_ << ": " << freed << " bytes of weights kept only in packed form\n";
  if (space_ != nullptr) {
    const Program program = this->program();
    space_->finish(program);
    report << space_->report(program);
  } else if (order_.size() == 1) {
    report << engine_ << ": " << steps_.size() << " kernels, " << pool_->threads() << " threads\n";
  } else {
    int segments = 0;
    for (size_t s = 0; s < steps_.size(); ++s) segments += s == 0 || steps_[s].backend != steps_[s - 1].backend;
    for (const Backend* b : order_) {
      int64_t kernels = 0;
      for (const Step& step : steps_) kernels += step.backend == b;
      report << b->name() << ": " << kernels << " kernels\n";
    }
    report << engine_ << ": " << segments << " segments, " << pool_->threads() << " threads\n";
  }
  report_ = report.str();
}

void Executor::index_values() {
  ir::Graph& g = model_.graph();
  for (ir::Value* v : g.values()) {
    index_[v] = static_cast<int>(values_.size());
    ValueEntry e;
    e.value = v;
    for (const auto& [key, value] : v->metadata()) e.channels_last = e.channels_last || key == passes::kChannelsLast;
    if (v->has_initializer()) {
      e.slot = Slot::kConstant;
      e.constant = &v->initializer();
      e.constant_dims = v->initializer().dims();
    }
    values_.push_back(e);
  }
  for (ir::Value* v : g.inputs()) {
    ValueEntry& e = values_[static_cast<size_t>(index_.at(v))];
    e.slot = Slot::kInput;  // an initializer here is the input's default
    e.input = static_cast<int>(inputs_.size());
    input_values_.push_back(index_.at(v));
    inputs_.push_back({v->name(), v->type().dtype(), v->type().shape()});
  }
  for (ir::Value* v : g.outputs()) {
    ValueEntry& e = values_[static_cast<size_t>(index_.at(v))];
    if (e.output < 0) e.output = static_cast<int>(outputs_.size());
    if (e.slot == Slot::kArena) e.slot = Slot::kOutput;
    output_values_.push_back(index_.at(v));
    outputs_.push_back({v->name(), v->type().dtype(), v->type().shape()});
  }
}

// Weights a kernel packed are kept only in packed form: the original buffer is dropped when
// no other step reads it and it is not a graph input's default or output.
int64_t Executor::release_packed_constants() {
  std::vector<int> readers(values_.size(), 0), packers(values_.size(), 0);
  for (const Step& s : steps_)
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i] < 0) continue;
      ++readers[static_cast<size_t>(s.inputs[i])];
      if (s.kernel != nullptr && s.kernel->packs_input(i)) ++packers[static_cast<size_t>(s.inputs[i])];
    }
  int64_t freed = 0;
  for (size_t v = 0; v < values_.size(); ++v) {
    ValueEntry& e = values_[v];
    if (e.slot != Slot::kConstant || readers[v] == 0 || packers[v] != readers[v] || e.output >= 0) continue;
    ir::Value* value = model_.graph().find(e.value->name());
    if (value == nullptr || !value->has_initializer() || e.constant != &value->initializer()) continue;
    freed += value->initializer().nbytes();
    value->mutable_initializer() = ir::Tensor::zeros(value->initializer().dtype(), {0});
    e.constant = nullptr;
    e.released = true;
  }
  return freed;
}

// The backend of a node: the first of the session's order that supports it, except that a view
// (Reshape, Flatten, Squeeze, Unsqueeze, Identity) stays with its data, on the backend that
// computes its input when that one supports it. `why` gets every backend's reason when none does.
const Backend* Executor::place(const KernelInit& init, const std::vector<const ir::Value*>& inputs, std::string& why,
                                size_t from) const {
  why.clear();
  if (ops::keeps_bytes(init.node) && !inputs.empty() && inputs[0] != nullptr) {
    const int producer = values_[static_cast<size_t>(index_.at(inputs[0]))].producer;
    const Backend* with_data = producer >= 0 ? placed_[static_cast<size_t>(producer)] : nullptr;
    const auto at = static_cast<size_t>(std::find(order_.begin(), order_.end(), with_data) - order_.begin());
    if (with_data != nullptr && at >= from && with_data->supports(init).empty()) {
      if (with_data != order_.front()) why = "its data is computed on " + std::string(with_data->name()) + ", where the view stays";
      return with_data;
    }
  }
  for (size_t k = from; k < order_.size(); ++k) {
    const Backend* b = order_[k];
    const std::string reason = b->supports(init);
    if (reason.empty()) return b;
    why += (why.empty() ? "" : "; ") + (order_.size() > 1 ? std::string(b->name()) + ": " : std::string()) + reason;
  }
  return nullptr;
}

// Places every node (in topological order), orders the steps so that each backend runs long
// stretches, then makes their kernels (a space's as it places them: its kernel may refuse).
void Executor::create_steps() {
  const std::vector<ir::Node*> order = model_.graph().topological_order();
  constants_.reserve(order.size());  // stable addresses for the pointers taken below
  std::vector<std::string> unsupported, refused, sized;
  std::vector<NodeInit> inits;
  std::vector<const ir::Node*> nodes;
  std::vector<std::unique_ptr<Kernel>> made_by_space;  // per node: the space's kernel, made at placement
  std::vector<std::string> whys;
  std::vector<bool> shapes_only;  // per node: computes on dims and constants alone (Shape, Size and what follows)
  for (const ir::Node* n : order) {
    if (n->op_type() == "Constant" && (n->domain().empty() || n->domain() == "ai.onnx")) {
      constants_.push_back(ops::constant_value(*n));
      ValueEntry& e = values_[static_cast<size_t>(index_.at(n->output(0)))];
      e.constant = &constants_.back();
      e.constant_dims = e.constant->dims();
      if (e.slot != Slot::kOutput) e.slot = Slot::kConstant;  // an output gets a copy at run time
      continue;
    }
    NodeInit made = kernel_init(*n, model_, pool_, [&](const ir::Value* in) -> const ir::Tensor* {
      const ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
      return e.slot == Slot::kConstant ? e.constant : nullptr;
    });
    const bool dims_only = ops::reads_dims_only(*n);
    bool on_shapes = true, computed = false;
    for (const ir::Value* in : made.inputs) {
      if (in == nullptr || dims_only) continue;
      const ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
      const bool from_shapes = e.producer >= 0 && shapes_only[static_cast<size_t>(e.producer)];
      on_shapes = on_shapes && (e.slot == Slot::kConstant || from_shapes);
      computed = computed || from_shapes;
    }
    std::string why;
    const Backend* backend = place(made.init, made.inputs, why);
    std::unique_ptr<Kernel> kernel;
    if (backend != nullptr && space_ != nullptr && backend == order_.front()) {
      // Integers computed from shapes and constants alone (a Range over a Shape's dims, a
      // Concat of them) stay on the host rather than pull shapes into the space.
      bool integers = true;
      for (const ir::Value* out : n->outputs())
        integers = integers && (out == nullptr || out->type().dtype() == ir::DType::kInt64 || out->type().dtype() == ir::DType::kInt32);
      std::string no;
      if (on_shapes && computed && integers && order_[1]->supports(made.init).empty()) no = "it computes on shapes alone";
      else kernel = space_->create(made.init, no);
      if (!no.empty()) {
        kernel.reset();
        std::string rest;
        backend = place(made.init, made.inputs, rest, 1);
        why = backend != nullptr ? no : std::string(order_.front()->name()) + ": " + no + "; " + rest;
      }
    }
    if (backend == nullptr) {
      unsupported.push_back(n->describe() + ": " + why);
      continue;
    }
    // Off the first backend, `why` is that one's reason: "cpu fallback: Sinh: no kernel".
    if (const std::string first = std::string(order_.front()->name()) + ": "; why.rfind(first, 0) == 0) why.erase(0, first.size());
    on_shapes = dims_only || on_shapes;
    const bool host_shapes = on_shapes && (space_ == nullptr || backend != order_.front());
    shapes_only.push_back(space_ != nullptr ? host_shapes : on_shapes);
    // strict: every node on the first backend, shape computations aside.
    if (strict_ && backend != order_.front() && !on_shapes) {
      const std::string reason = !why.empty() ? why : order_.front()->supports(made.init);
      refused.push_back(n->describe() + ": " + (reason.empty() ? "its data is computed on " + std::string(backend->name()) : reason));
    }
    for (const ir::Value* out : n->outputs())
      if (out != nullptr) values_[static_cast<size_t>(index_.at(out))].producer = static_cast<int>(nodes.size());
    placed_.push_back(backend);
    nodes.push_back(n);
    inits.push_back(std::move(made));
    made_by_space.push_back(std::move(kernel));
    whys.push_back(backend != order_.front() ? why : std::string());
  }
  if (!unsupported.empty()) {
    std::string msg = engine_ + " cannot run " + std::to_string(unsupported.size()) +
                      " node" + (unsupported.size() > 1 ? "s" : "") + " of this model:";
    for (const auto& u : unsupported) msg += "\n  " + u;
    throw UnsupportedError(msg);
  }
  if (!refused.empty()) {
    std::string msg = "strict: the " + std::string(order_.front()->name()) + " backend cannot run " +
                      std::to_string(refused.size()) + " node" + (refused.size() > 1 ? "s" : "") + " of this model";
    if (order_.size() > 1) msg += " (without strict they run on " + std::string(order_[1]->name()) + ")";
    msg += ":";
    for (const auto& u : refused) msg += "\n  " + u;
    throw UnsupportedError(msg);
  }
  std::vector<int> backend_of;
  std::vector<std::vector<size_t>> after(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) {
    backend_of.push_back(static_cast<int>(std::find(order_.begin(), order_.end(), placed_[k]) - order_.begin()));
    // With a space, steps need follow only the producers whose data they read: not those of
    // inputs read for their dims (Shape), nor inputs a space's kernel takes from inference.
    if (space_ != nullptr && ops::reads_dims_only(*nodes[k])) continue;
    for (size_t i = 0; i < inits[k].inputs.size(); ++i) {
      const ir::Value* in = inits[k].inputs[i];
      if (in == nullptr) continue;
      if (made_by_space[k] != nullptr && !space_->reads_input(*made_by_space[k], i)) continue;
      if (const int p = values_[static_cast<size_t>(index_.at(in))].producer; p >= 0) after[k].push_back(static_cast<size_t>(p));
    }
  }
  for (size_t k : order_by_backend(backend_of, after)) {
    const KernelInit& init = inits[k].init;
    Step& step = steps_.emplace_back();
    step.node = nodes[k];
    step.backend = placed_[k];
    step.dims_only = ops::reads_dims_only(*step.node);
    step.shapes_only = shapes_only[k];
    step.why = whys[k];
    if (made_by_space[k] != nullptr) {
      step.owned = std::move(made_by_space[k]);
    } else {
      step.owned = step.backend->create(init);
      // Every kernel of a backend without a space computes on host memory.
      step.kernel = dynamic_cast<HostKernel*>(step.owned.get());
      if (step.kernel == nullptr)
        throw InternalError(step.node->describe() + ": the " + std::string(step.backend->name()) +
                            " backend made a kernel that does not run on host memory");
      has_allocating_ = has_allocating_ || step.kernel->allocates_outputs();
      if (space_ != nullptr && step.kernel->allocates_outputs()) sized.push_back(step.node->describe());
      // Weights packed from a file mapping leave memory now (read again from the file if
      // anything reads the original later): the packed copy does not join them.
      for (size_t i = 0; i < init.constants.size(); ++i)
        if (init.constants[i] != nullptr && init.constants[i]->buffer() != nullptr && step.kernel->packs_input(i))
          init.constants[i]->buffer()->release_pages();
    }
    for (const ir::Value* in : inits[k].inputs) step.inputs.push_back(in ? index_.at(in) : -1);
    for (const ir::Value* out : nodes[k]->outputs()) {
      step.outputs.push_back(out ? index_.at(out) : -1);
      if (out != nullptr) values_[static_cast<size_t>(index_.at(out))].written = true;
    }
  }
  placed_.clear();
  if (!sized.empty()) {
    std::string msg = "the " + std::string(order_.front()->name()) + " backend needs every shape to follow from the input "
                      "shapes, and these nodes size their outputs from data:";
    for (const auto& u : sized) msg += "\n  " + u;
    throw UnsupportedError(msg + "\ncompile with device='cpu'");
  }
  // Producers by position in execution order, for the space.
  for (ValueEntry& e : values_) e.producer = -1;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int o : steps_[s].outputs)
      if (o >= 0) values_[static_cast<size_t>(o)].producer = static_cast<int>(s);
}

// What a space sees of the compiled session.
Program Executor::program() const {
  Program p;
  p.threads = pool_->threads();
  for (const ValueEntry& e : values_) {
    ProgramValue v;
    v.value = e.value;
    v.constant = e.constant;
    v.is_constant = e.slot == Slot::kConstant || (e.slot == Slot::kOutput && e.constant != nullptr);
    v.input = e.input;
    v.output = e.output;
    v.producer = e.producer;
    p.values.push_back(v);
  }
  for (const Step& s : steps_) {
    ProgramStep step;
    step.node = s.node;
    step.backend = s.backend;
    step.kernel = s.kernel == nullptr ? s.owned.get() : nullptr;
    step.inputs = s.inputs;
    step.outputs = s.outputs;
    step.dims_only = s.dims_only;
    step.shapes_only = s.shapes_only;
    step.why = s.why;
    p.steps.push_back(std::move(step));
  }
  return p;
}

std::shared_ptr<Plan> Executor::plan_for(const std::vector<const ir::Tensor*>& bound) const {
  std::vector<Dims> key = plan_key(bound, shape_input_, inputs_, engine_);
  std::lock_guard<std::mutex> lock(plans_mutex_);
  bool made = false;
  std::shared_ptr<Plan> plan = plans_.get(std::move(key), [&] { return make_plan(bound, Pins{}, 0); }, &made);
  if (made) {
    last_.arena_bytes = plan->arena_bytes;
    last_.intermediate_bytes = plan->intermediate_bytes;
    last_.scratch_bytes = plan->scratch_bytes;
    last_.plans = static_cast<int64_t>(plans_.size());
  }
  return plan;
}

// The plan for the steps after `plan` ends, for what this run found there.
std::shared_ptr<Plan> Executor::next_plan(Plan& plan, const std::vector<const ir::Tensor*>& bound,
                                            const std::vector<void*>& data, const std::vector<ir::Tensor>& heap) const {
  std::vector<Dims> key;
  Pins pins = plan.pins;
  if (plan.stall == Plan::Stall::kSizes) {
    for (int o : steps_[static_cast<size_t>(plan.end - 1)].outputs) {
      if (o < 0) continue;
      const Dims& d = heap[static_cast<size_t>(o)].dims();
      key.push_back(d);
      pins.dims.emplace_back(values_[static_cast<size_t>(o)].value->name(), d);
    }
  } else {
    const Step& step = steps_[static_cast<size_t>(plan.end)];
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const int v = step.inputs[i];
      if (v < 0 || !ops::is_shape_slot(*step.node, i) || values_[static_cast<size_t>(v)].value->producer() == nullptr) continue;
      const ir::DType dt = values_[static_cast<size_t>(v)].value->type().dtype();
      const Dims& d = plan.dims[static_cast<size_t>(v)];
      const int64_t n = ir::checked_num_elements(d).value_or(0);
      if (dt == ir::DType::kString || n > kMaxShapeTensorElements)
        throw UnsupportedError(step.node->describe() + ": input " + std::to_string(i) + " decides output shapes by its " +
                               std::to_string(n) + " values; the " + engine_ + " engine takes such values up to " +
                               std::to_string(kMaxShapeTensorElements) + " elements of a numeric type");
      const auto nbytes = static_cast<size_t>(ir::storage_bytes(dt, n).value_or(0));
      key.push_back(value_key(dt, data[static_cast<size_t>(v)], nbytes));
      pins.values.emplace_back(values_[static_cast<size_t>(v)].value->name(),
                               ir::Tensor::copy_of(dt, d, data[static_cast<size_t>(v)], static_cast<int64_t>(nbytes)));
    }
  }
  const int begin = plan.end;
  const bool values_pinned = plan.stall == Plan::Stall::kValues;
  std::lock_guard<std::mutex> lock(plan.mutex);
  return plan.next.get(std::move(key), [&] { return make_plan(bound, std::move(pins), begin, values_pinned); });
}

// Concrete shapes come from shape inference for the given input sizes (and, for shape tensors,
// the given values), with the sizes and values a run found pinned, into an overlay beside the
// compiled model: a copy of the model per plan took longer than the rest of planning.
// A plan may not need more than the session may take: no value past the limit, and not all of
// them together (the arena, the kernels' scratch and the outputs). Checked before a run
// allocates anything, so a size computed from data (a Tile of 1e6 x 1e6) is a typed error
// naming its node, not an allocation failure or a machine swapping.
void Executor::check_memory(const Plan& plan, int begin) const {
  int64_t outputs = 0, largest = -1;
  size_t largest_value = 0;
  const Step* largest_step = nullptr;
  for (int s = begin; s < plan.end; ++s) {
    const Step& step = steps_[static_cast<size_t>(s)];
    if (step.kernel->allocates_outputs()) continue;  // sized by the run (bounded by its inputs)
    for (int o : step.outputs) {
      if (o < 0) continue;
      const auto i = static_cast<size_t>(o);
      const int64_t bytes = checked_value_bytes(*step.node, values_[i].value->name(), values_[i].value->type().dtype(),
                                                plan.dims[i], max_memory_);
      if (values_[i].slot == Slot::kOutput) outputs += bytes;
      if (bytes > largest) {
        largest = bytes;
        largest_value = i;
        largest_step = &step;
      }
    }
  }
  const int64_t total = plan.arena_bytes + plan.scratch_bytes + outputs;
  if (total > max_memory_ && largest_step != nullptr)
    throw MemoryLimitError("a run with these input shapes would take " + std::to_string(total) +
                           " bytes of intermediates, scratch and outputs (the largest, output '" +
                           values_[largest_value].value->name() + "' of " + largest_step->node->describe() + ", " +
                           dims_text(plan.dims[largest_value]) + ": " + std::to_string(largest) +
                           " bytes); a run of this session may take " + std::to_string(max_memory_) +
                           " bytes (compile's max_memory)");
}

std::shared_ptr<Plan> Executor::make_plan(const std::vector<const ir::Tensor*>& bound, Pins pins, int begin,
                                            bool values_pinned) const {
  std::vector<Dims> input_dims;
  for (const ir::Tensor* t : bound) input_dims.push_back(t->dims());
  ops::InferenceOptions opts;
  for (const auto& [name, t] : pins.values) opts.output_values.emplace(name, &t);
  for (const auto& [name, d] : pins.dims) opts.output_dims.emplace(name, d);
  ops::TypeOverlay types;
  // A plan from the first step starts from the last such plan's inference (plans_mutex_ is
  // held): a decoding step re-infers the nodes its longer cache reaches, not the whole graph.
  const bool from_memo = begin == 0 && !values_pinned && pins.values.empty() && pins.dims.empty();
  infer_for_inputs(model_, inputs_, bound, shape_input_, std::move(opts), types, from_memo ? &memo_ : nullptr);
  const ops::TypeOverlay& inferred = from_memo ? memo_.types : types;

  auto plan = std::make_shared<Plan>();
  plan->begin = begin;
  plan->pins = std::move(pins);
  plan->dims.resize(values_.size());
  plan->offsets.assign(values_.size(), 0);
  plan->heap.assign(values_.size(), false);
  plan->known.assign(values_.size(), true);
  std::vector<bool>& known = plan->known;
  std::vector<std::string> shape_text(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    const ValueEntry& e = values_[i];
    if (e.slot == Slot::kConstant) {
      plan->dims[i] = e.constant_dims;
      continue;
    }
    if (e.slot == Slot::kInput) continue;  // set below
    const ir::ValueType& type = inferred.type_of(*e.value);
    auto sizes = type.shape().static_sizes();
    if (sizes) {
      plan->dims[i] = *sizes;
    } else {
      known[i] = false;
      shape_text[i] = type.to_string();
    }
  }
  for (size_t k = 0; k < inputs_.size(); ++k) plan->dims[static_cast<size_t>(input_values_[k])] = input_dims[k];

  // Where this plan ends: at the first step whose outputs' sizes it cannot know.
  const int nsteps = static_cast<int>(steps_.size());
  plan->end = nsteps;
  for (int s = begin; s < nsteps; ++s) {
    const Step& step = steps_[static_cast<size_t>(s)];
    int unknown = -1;
    for (int o : step.outputs)
      if (o >= 0 && !known[static_cast<size_t>(o)]) unknown = o;
    if (unknown < 0) continue;
    bool inputs_known = true;
    bool computed_shape_input = false;
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const int v = step.inputs[i];
      if (v < 0) continue;
      inputs_known = inputs_known && known[static_cast<size_t>(v)];
      computed_shape_input = computed_shape_input ||
                             (ops::is_shape_slot(*step.node, i) && values_[static_cast<size_t>(v)].value->producer() != nullptr &&
                              values_[static_cast<size_t>(v)].slot != Slot::kConstant);
    }
    if (inputs_known && step.kernel->allocates_outputs()) {
      plan->end = s + 1;
      plan->stall = Plan::Stall::kSizes;
    } else if (inputs_known && computed_shape_input && !(values_pinned && s == begin)) {
      plan->end = s;
      plan->stall = Plan::Stall::kValues;
    } else {
      const ValueEntry& e = values_[static_cast<size_t>(unknown)];
      throw UnsupportedError("value '" + e.value->name() + "' (output of " + step.node->describe() +
                             ") has a shape that depends on data (" + shape_text[static_cast<size_t>(unknown)] +
                             "); the " + engine_ + " engine needs every shape to follow from the input shapes, the values of "
                             "shape-carrying inputs and the outputs of ops that size their outputs themselves");
    }
    break;
  }

  // Lifetimes of the values this plan's steps write. One used after the plan ends lives to its
  // end: the run keeps every plan's arena until it returns.
  std::vector<int> first(values_.size(), -1), last(values_.size(), -1);
  for (int s = begin; s < plan->end; ++s) {
    const Step& step = steps_[static_cast<size_t>(s)];
    const bool alloc = step.kernel->allocates_outputs();
    for (int o : step.outputs) {
      if (o < 0) continue;
      first[static_cast<size_t>(o)] = last[static_cast<size_t>(o)] = s;
      plan->heap[static_cast<size_t>(o)] = alloc;
    }
    for (int in : step.inputs)
      if (in >= 0) last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], s);
  }
  for (int s = plan->end; s < nsteps; ++s)
    for (int in : steps_[static_cast<size_t>(s)].inputs)
      if (in >= 0 && first[static_cast<size_t>(in)] >= 0) last[static_cast<size_t>(in)] = plan->end - 1;
  // A Reshape (or Flatten, Squeeze, Unsqueeze, Identity: ops that keep the bytes) from an arena
  // value to an arena value shares its input's bytes: the output goes at the input's offset,
  // the input lives as long as either, and the kernel, seeing one buffer, copies nothing.
  std::vector<int> alias(values_.size(), -1);
  for (int s = begin; s < plan->end; ++s) {
    const Step& step = steps_[static_cast<size_t>(s)];
    if (step.node == nullptr || !ops::keeps_bytes(*step.node) || step.inputs.empty() || step.outputs.size() != 1) continue;
    const int in = step.inputs[0], out = step.outputs[0];
    if (in < 0 || out < 0 || values_[static_cast<size_t>(in)].slot != Slot::kArena ||
        values_[static_cast<size_t>(out)].slot != Slot::kArena || first[static_cast<size_t>(in)] < 0 ||
        plan->heap[static_cast<size_t>(in)] ||
        values_[static_cast<size_t>(in)].value->type().dtype() != values_[static_cast<size_t>(out)].value->type().dtype() ||
        ir::checked_num_elements(plan->dims[static_cast<size_t>(in)]) !=
            ir::checked_num_elements(plan->dims[static_cast<size_t>(out)]))
      continue;
    int root = in;
    while (alias[static_cast<size_t>(root)] >= 0) root = alias[static_cast<size_t>(root)];
    alias[static_cast<size_t>(out)] = root;
    last[static_cast<size_t>(root)] = std::max(last[static_cast<size_t>(root)], last[static_cast<size_t>(out)]);
  }
  // Each value within the limit before the arena adds their sizes up (values of 1e18 bytes
  // each would overflow its offsets); the whole, scratch included, once it is known.
  check_memory(*plan, begin);
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> placed;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (first[i] < 0 || plan->heap[i]) continue;
    if (values_[i].slot == Slot::kOutput) plan->writes.push_back(static_cast<int>(i));
    if (values_[i].slot != Slot::kArena) continue;
    plan->writes.push_back(static_cast<int>(i));
    if (alias[i] >= 0) continue;
    const auto bytes = ir::storage_bytes(values_[i].value->type().dtype(), ir::checked_num_elements(plan->dims[i]).value_or(0));
    lifetimes.push_back({bytes.value_or(0), first[i], last[i]});
    placed.push_back(i);
  }
  auto lay_out = [&](const ArenaPlan& arena) {
    for (size_t k = 0; k < placed.size(); ++k) plan->offsets[placed[k]] = arena.offsets[k];
    for (size_t i = 0; i < values_.size(); ++i) {
      int root = alias[i];
      if (root < 0) continue;
      while (alias[static_cast<size_t>(root)] >= 0) root = alias[static_cast<size_t>(root)];
      plan->offsets[i] = plan->offsets[static_cast<size_t>(root)];
    }
    plan->arena_bytes = arena.arena_bytes;
    plan->intermediate_bytes = arena.sum_bytes;
  };
  lay_out(arena_for(lifetimes, placed, begin == 0 && from_memo));

  std::vector<View> scratch_ins, scratch_outs;  // reused: their dims keep their capacity
  for (int s = begin; s < plan->end; ++s) {
    const Step& step = steps_[static_cast<size_t>(s)];
    set_views(scratch_ins, step.inputs, plan->dims, nullptr);
    set_views(scratch_outs, step.outputs, plan->dims, nullptr);
    plan->scratch_bytes = std::max(plan->scratch_bytes, step.kernel->scratch_bytes(scratch_ins, scratch_outs));
  }
  try {
    check_memory(*plan, begin);
  } catch (const MemoryLimitError&) {
    // The layout kept for later steps may have room this run cannot afford: the tight one.
    const ArenaPlan tight = plan_arena(lifetimes);
    if (tight.arena_bytes >= plan->arena_bytes) throw;
    lay_out(tight);
    check_memory(*plan, begin);
  }
  return plan;
}

// The arena layout of a plan from the first step. Consecutive plans of a decoder differ by a
// row of cache: the same values with the same lifetimes, a little larger. When the previous
// layout holds every value of this one, its offsets serve again; when it does not, the new
// layout leaves each value room to grow by an eighth, so that the next steps reuse it.
ArenaPlan Executor::arena_for(const std::vector<Lifetime>& lifetimes, const std::vector<size_t>& placed, bool reuse) const {
  if (!reuse) return plan_arena(lifetimes);
  Layout& last = layout_;
  bool same = last.placed == placed;
  for (size_t k = 0; same && k < lifetimes.size(); ++k)
    same = lifetimes[k].first == last.lifetimes[k].first && lifetimes[k].last == last.lifetimes[k].last;
  bool fits = same;
  for (size_t k = 0; fits && k < lifetimes.size(); ++k) fits = lifetimes[k].bytes <= last.lifetimes[k].bytes;
  ArenaPlan arena;
  if (fits) {
    arena = last.arena;
  } else {
    std::vector<Lifetime> roomy = lifetimes;
    if (same)  // grown: room for the next steps
      for (Lifetime& l : roomy) l.bytes += l.bytes / 8;
    arena = plan_arena(roomy);
    last = Layout{placed, std::move(roomy), arena};
  }
  arena.sum_bytes = 0;
  for (const Lifetime& l : lifetimes) arena.sum_bytes += l.bytes;
  return arena;
}

void Executor::set_views(std::vector<View>& views, const std::vector<int>& values, const std::vector<Dims>& dims,
                         const std::vector<void*>* data) const {
  views.resize(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    View& v = views[k];
    const int i = values[k];
    if (i < 0) {
      v.dtype = ir::DType::kFloat32;
      v.dims.clear();
      v.data = nullptr;
      continue;
    }
    v.dtype = values_[static_cast<size_t>(i)].value->type().dtype();
    v.dims.assign(dims[static_cast<size_t>(i)].begin(), dims[static_cast<size_t>(i)].end());
    v.data = data != nullptr ? (*data)[static_cast<size_t>(i)] : nullptr;
  }
}

std::shared_ptr<ir::Buffer> Executor::take_buffer(Spare& spare, int64_t bytes, bool* made) const {
  int64_t room = bytes;
  {
    std::lock_guard<std::mutex> lock(spare_mutex_);
    // The smallest that fits and wastes at most half of itself; copied here, under the lock,
    // so that no other run takes it too.
    std::shared_ptr<ir::Buffer> found;
    for (const std::shared_ptr<ir::Buffer>& b : spare.buffers)
      if (b.use_count() == 1 && b->size() >= bytes && b->size() <= 2 * bytes + 65536 && (found == nullptr || b->size() < found->size()))
        found = b;
    const bool grew = spare.last_bytes >= 0 && bytes > spare.last_bytes;
    spare.last_bytes = bytes;
    if (found != nullptr) return found;
    // None fits: the free ones go (they fit no size seen lately), the new one has room to grow.
    spare.buffers.erase(std::remove_if(spare.buffers.begin(), spare.buffers.end(),
                                       [](const std::shared_ptr<ir::Buffer>& b) { return b.use_count() == 1; }),
                        spare.buffers.end());
    if (grew) room = std::max(bytes, std::min(max_memory_, (bytes + bytes / 4 + 4095) / 4096 * 4096));
  }
  std::shared_ptr<ir::Buffer> b = ir::Buffer::allocate(room);
  if (made != nullptr) *made = true;
  std::lock_guard<std::mutex> lock(spare_mutex_);
  // Buffers callers still hold are dropped from the list past a few: they are theirs now.
  if (spare.buffers.size() >= 3) spare.buffers.erase(spare.buffers.begin());
  spare.buffers.push_back(b);
  return b;
}

ir::Tensor Executor::output_tensor(size_t k, ir::DType dtype, const std::vector<int64_t>& dims) const {
  const std::optional<int64_t> n = ir::checked_num_elements(dims);
  const std::optional<int64_t> bytes = n ? ir::storage_bytes(dtype, *n) : std::nullopt;
  if (dtype == ir::DType::kString || !bytes) return ir::Tensor::zeros(dtype, dims);  // the error it gives
  return ir::Tensor::from_buffer(dtype, dims, ir::Buffer::prefix(take_buffer(spare_[k], *bytes), *bytes));
}

std::vector<ir::Tensor> Executor::run_capture(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                                const std::vector<std::string>& names,
                                                std::vector<std::pair<std::string, ir::Tensor>>& captured) const {
  Watch watch{std::vector<int>(values_.size(), names.empty() ? 0 : -1)};
  for (const std::string& name : names) {
    const ir::Value* v = model_.graph().find(name);
    if (v != nullptr) watch.slot[static_cast<size_t>(index_.at(v))] = 0;
  }
  const Observer copy = [&captured](const ObservedValue& o) {
    const auto bytes = ir::storage_bytes(o.dtype, ir::checked_num_elements(o.dims).value_or(0)).value_or(0);
    captured.emplace_back(o.name, ir::Tensor::copy_of(o.dtype, o.dims, o.data, bytes));
  };
  watch.observer = &copy;
  return run_steps(inputs, &watch);
}

std::vector<ir::Tensor> Executor::run_observe(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                                const std::vector<std::string>& names, const Observer& observer) const {
  Watch watch{std::vector<int>(values_.size(), -1), true, &observer};
  for (size_t k = 0; k < names.size(); ++k) {
    const ir::Value* v = model_.graph().find(names[k]);
    const int i = v != nullptr ? index_.at(v) : -1;
    if (i < 0 || !(values_[static_cast<size_t>(i)].written || values_[static_cast<size_t>(i)].slot == Slot::kInput))
      throw ArgumentError("cannot observe '" + names[k] + "': " +
                          (v == nullptr ? std::string("the compiled model has no value of that name (fused away? compile with keep)")
                                        : std::string("no kernel writes it (a constant)")));
    if (watch.slot[static_cast<size_t>(i)] >= 0) throw ArgumentError("cannot observe '" + names[k] + "' twice in one run");
    watch.slot[static_cast<size_t>(i)] = static_cast<int>(k);
  }
  return run_steps(inputs, &watch);
}

std::vector<StepInfo> Executor::steps() const {
  std::vector<StepInfo> out;
  out.reserve(steps_.size());
  for (const Step& s : steps_) {
    out.push_back(step_info(*s.node));
    out.back().backend = std::string(s.backend->name());
  }
  return out;
}

std::vector<ir::Tensor> Executor::run_steps(const std::vector<std::pair<std::string, ir::Tensor>>& named,
                                              const Watch* watch) const {
  if (space_ != nullptr) return run_space(named, watch);
  const std::vector<const ir::Tensor*> bound = bind_inputs(named);
  std::shared_ptr<Plan> plan = plan_for(bound);

  // The arenas this run holds, one per plan it runs; free for other runs once it returns.
  std::vector<std::shared_ptr<ir::Buffer>> leases;
  auto lease = [&](const std::shared_ptr<Plan>& p) -> std::byte* {
    bool made = false;
    leases.push_back(take_buffer(arenas_, p->arena_bytes + p->scratch_bytes, &made));
    if (made) {
      std::lock_guard<std::mutex> lock(plans_mutex_);
      ++last_.arenas;
    }
    return leases.back()->mutable_data();
  };

  std::vector<ir::Tensor> outputs(outputs_.size());
  std::vector<void*> data(values_.size(), nullptr);
  std::vector<ir::Tensor> heap(has_allocating_ ? values_.size() : 0);  // outputs of allocating steps
  for (size_t i = 0; i < values_.size(); ++i) {
    const ValueEntry& e = values_[i];
    if (e.slot == Slot::kInput) {
      data[i] = const_cast<void*>(bound[static_cast<size_t>(e.input)]->raw_data());
    } else if (e.slot == Slot::kConstant || (e.slot == Slot::kOutput && e.constant != nullptr)) {
      // A Constant node's value that is also an output: kernels read the constant, and the
      // output gets a copy after the run.
      data[i] = e.released || e.constant->dtype() == ir::DType::kString ? nullptr : const_cast<void*>(e.constant->raw_data());
    }
  }
  auto notify = [&](int value, const View& view) {
    const int slot = watch->slot[static_cast<size_t>(value)];
    if (slot < 0 || view.data == nullptr) return;
    const ValueEntry& e = values_[static_cast<size_t>(value)];
    if (e.channels_last && view.dims.size() == 4 && ir::dtype_bits(view.dtype) % 8 == 0) {
      const Dims dims = {view.dims[0], view.dims[3], view.dims[1], view.dims[2]};
      const std::vector<std::byte> nchw = channels_first(view.data, ir::dtype_bits(view.dtype) / 8, view.dims);
      (*watch->observer)(ObservedValue{static_cast<size_t>(slot), e.value->name(), view.dtype, dims, nchw.data()});
      return;
    }
    (*watch->observer)(ObservedValue{static_cast<size_t>(slot), e.value->name(), view.dtype, view.dims, view.data});
  };
  if (watch != nullptr && watch->inputs)
    for (int in : input_values_) {
      const auto i = static_cast<size_t>(in);
      notify(in, View{values_[i].value->type().dtype(), plan->dims[i], data[i]});
    }
  std::vector<View> ins, outs;  // reused from step to step: their dims keep their capacity
  for (;;) {
    std::byte* base = lease(plan);
    for (int v : plan->writes) {
      const auto i = static_cast<size_t>(v);
      const ValueEntry& e = values_[i];
      if (e.slot == Slot::kArena) {
        data[i] = base + plan->offsets[i];
      } else if (e.slot == Slot::kOutput && e.constant == nullptr) {
        outputs[static_cast<size_t>(e.output)] = output_tensor(static_cast<size_t>(e.output), e.value->type().dtype(), plan->dims[i]);
        data[i] = outputs[static_cast<size_t>(e.output)].mutable_raw_data();
      }
    }
    RunContext ctx{pool_.get(), base + plan->arena_bytes};
    for (int s = plan->begin; s < plan->end; ++s) {
      InterruptScope::poll();
      const Step& step = steps_[static_cast<size_t>(s)];
      set_views(ins, step.inputs, plan->dims, &data);
      set_views(outs, step.outputs, plan->dims, &data);
      const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      if (!step.kernel->allocates_outputs()) {
        step.kernel->run(ctx, ins, outs);
      } else {
        std::vector<ir::Tensor> made = static_cast<const AllocatingKernel&>(*step.kernel).run_alloc(ctx, ins, outs);
        for (size_t k = 0; k < step.outputs.size(); ++k) {
          const int o = step.outputs[k];
          if (o < 0) continue;
          if (k >= made.size())
            throw ShapeError(step.node->describe() + ": output " + std::to_string(k) + " is not one the op makes (it makes " +
                             std::to_string(made.size()) + ")");
          const auto i = static_cast<size_t>(o);
          const ValueEntry& e = values_[i];
          ir::Tensor& t = made[k];
          if (!t.is_valid() || (t.dtype() != e.value->type().dtype() && e.value->type().dtype() != ir::DType::kUndefined))
            throw InternalError(step.node->describe() + ": output " + std::to_string(k) + " was not made as planned");
          // Planned from shape inference, which takes declared shapes (a control-flow body's
          // outputs, value_info) at their word: a node that computes another shape contradicts them.
          if (plan->known[i] && t.dims() != plan->dims[i])
            throw ShapeError(step.node->describe() + ": output " + std::to_string(k) + " ('" + e.value->name() + "') is " +
                             ir::Shape::of(t.dims()).to_string() + " at run time, where shape inference gave " +
                             ir::Shape::of(plan->dims[i]).to_string() + " from the model's declared shapes");
          ir::Tensor& home = e.slot == Slot::kOutput ? outputs[static_cast<size_t>(e.output)] : heap[i];
          home = std::move(t);
          data[i] = home.nbytes() == 0 ? static_cast<void*>(kEmptyData) : home.mutable_raw_data();
          outs[k] = View{home.dtype(), home.dims(), data[i]};
        }
      }
      if (profile_) {
        step.nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        ++step.runs;
      }
      if (watch == nullptr) continue;
      for (size_t k = 0; k < step.outputs.size(); ++k)
        if (step.outputs[k] >= 0) notify(step.outputs[k], outs[k]);
    }
    if (plan->stall == Plan::Stall::kNone) break;
    if (plan->stall == Plan::Stall::kSizes)  // the sizes the step found, wherever its outputs went
      for (int o : steps_[static_cast<size_t>(plan->end - 1)].outputs)
        if (o >= 0 && values_[static_cast<size_t>(o)].slot == Slot::kOutput)
          heap[static_cast<size_t>(o)] = outputs[static_cast<size_t>(values_[static_cast<size_t>(o)].output)];
    plan = next_plan(*plan, bound, data, heap);
  }
  // Outputs that no step writes (a graph input or a constant passed straight through) are copies.
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const auto i = static_cast<size_t>(output_values_[k]);
    const ValueEntry& e = values_[i];
    if (outputs[k].is_valid() && e.output == static_cast<int>(k) && e.slot == Slot::kOutput && e.constant == nullptr) continue;
    const ir::Tensor* src = e.slot == Slot::kInput ? bound[static_cast<size_t>(e.input)] : e.constant;
    if (src != nullptr) {
      outputs[k] = src->dtype() == ir::DType::kString ? *src : ir::Tensor::copy_of(src->dtype(), src->dims(), src->raw_data(), src->nbytes());
    } else {  // the same value listed twice as an output
      const ir::Tensor& first = outputs[static_cast<size_t>(e.output)];
      outputs[k] = ir::Tensor::copy_of(first.dtype(), first.dims(), first.raw_data(), first.nbytes());
    }
  }
  return outputs;
}

}  // namespace tether::engine::exec

namespace tether::engine {

using exec::Executor;

std::unique_ptr<Session> compile_on(const ir::Model& model, const CompileOptions& options, std::vector<const Backend*> order,
                                    std::shared_ptr<util::ThreadPool> pool) {
  return std::make_unique<Executor>(model, options, std::move(order), std::move(pool));
}

std::vector<size_t> order_by_backend(const std::vector<int>& backend, const std::vector<std::vector<size_t>>& after) {
  const size_t n = backend.size();
  std::vector<std::vector<size_t>> readers(n);
  std::vector<int> waiting(n, 0);
  for (size_t s = 0; s < n; ++s)
    for (size_t p : after[s]) {
      readers[p].push_back(s);
      ++waiting[s];
    }
  // Ready steps per backend, earliest first (a min-heap by position).
  const int backends = n == 0 ? 0 : *std::max_element(backend.begin(), backend.end()) + 1;
  std::vector<std::priority_queue<size_t, std::vector<size_t>, std::greater<>>> ready(static_cast<size_t>(backends));
  for (size_t s = 0; s < n; ++s)
    if (waiting[s] == 0) ready[static_cast<size_t>(backend[s])].push(s);
  std::vector<size_t> order;
  order.reserve(n);
  int current = -1;
  while (order.size() < n) {
    if (current < 0 || ready[static_cast<size_t>(current)].empty()) {
      // Switch to the backend whose earliest ready step comes first.
      current = -1;
      for (int b = 0; b < backends; ++b)
        if (!ready[static_cast<size_t>(b)].empty() &&
            (current < 0 || ready[static_cast<size_t>(b)].top() < ready[static_cast<size_t>(current)].top()))
          current = b;
      if (current < 0) throw InternalError("the steps of a session form a cycle");
    }
    const size_t s = ready[static_cast<size_t>(current)].top();
    ready[static_cast<size_t>(current)].pop();
    order.push_back(s);
    for (size_t r : readers[s])
      if (--waiting[r] == 0) ready[static_cast<size_t>(backend[r])].push(r);
  }
  return order;
}

}  // namespace tether::engine