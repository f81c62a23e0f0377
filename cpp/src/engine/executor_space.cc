// The executor's sessions whose first backend computes in memory of its own (engine/space.h):
// plans per input shapes and capture, with the space's device plan beside the host's; runs
// one at a time, stretch by stretch; profiles with device stretches.
#include <algorithm>
#include <chrono>
#include <new>

#include "engine/executor_parts.h"
#include "engine/planner.h"
#include "engine/session.h"
#include "util/thread_pool.h"

namespace tether::engine::exec {

// ---- sessions with a space ---------------------------------------------------------------------

std::shared_ptr<Plan> Executor::space_plan_for(const std::vector<const ir::Tensor*>& bound, bool capture) const {
  std::vector<Dims> key = plan_key(bound, shape_input_, inputs_, engine_);
  key.push_back({capture ? 1 : 0});
  std::lock_guard<std::mutex> lock(plans_mutex_);
  bool made = false;
  std::shared_ptr<Plan> plan = plans_.get(std::move(key), [&] { return make_space_plan(bound, capture); }, &made);
  if (made) {
    plan->device->stats(last_);
    last_.scratch_bytes = plan->arena_bytes + plan->scratch_bytes;
    last_.plans = static_cast<int64_t>(plans_.size());
    last_.arenas = last_.plans;
  }
  return plan;
}

// The host kernel of a space step whose own kernel refused a plan's shapes (`why`).
std::unique_ptr<HostKernel> Executor::host_fallback(const Step& step, const std::string& why) const {
  const NodeInit made = kernel_init(*step.node, model_, pool_, [&](const ir::Value* in) -> const ir::Tensor* {
    const ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
    return e.slot == Slot::kConstant ? e.constant : nullptr;
  });
  std::string why_not;
  for (size_t k = 1; k < order_.size(); ++k) {
    const std::string reason = order_[k]->supports(made.init);
    if (!reason.empty()) {
      why_not += (why_not.empty() ? "" : "; ") + std::string(order_[k]->name()) + ": " + reason;
      continue;
    }
    std::unique_ptr<Kernel> kernel = order_[k]->create(made.init);
    auto* host = dynamic_cast<HostKernel*>(kernel.get());
    if (host != nullptr && !host->allocates_outputs()) {
      kernel.release();
      return std::unique_ptr<HostKernel>(host);
    }
    why_not += (why_not.empty() ? "" : "; ") + std::string(order_[k]->name()) + ": its kernel sizes its outputs from data";
  }
  throw UnsupportedError(why + "; nor can " + (why_not.empty() ? std::string("any other backend") : why_not));
}

std::shared_ptr<Plan> Executor::make_space_plan(const std::vector<const ir::Tensor*>& bound, bool capture) const {
  // Shapes for these inputs, beside the compiled model (which concurrent calls read).
  ops::TypeOverlay types;
  infer_for_inputs(model_, inputs_, bound, shape_input_, {}, types);
  auto plan = std::make_shared<Plan>();
  const size_t n = values_.size();
  plan->end = static_cast<int>(steps_.size());
  plan->dims.resize(n);
  plan->known.assign(n, true);
  for (size_t i = 0; i < n; ++i) {
    const ValueEntry& e = values_[i];
    if (e.slot == Slot::kInput) {
      plan->dims[i] = bound[static_cast<size_t>(e.input)]->dims();
    } else if (e.constant != nullptr || e.released) {
      plan->dims[i] = e.constant_dims;
    } else if (e.producer >= 0) {
      const ir::ValueType& type = types.type_of(*e.value);
      auto sizes = type.shape().static_sizes();
      if (!sizes)
        throw UnsupportedError("value '" + e.value->name() + "' (output of " +
                               steps_[static_cast<size_t>(e.producer)].node->describe() + ") has a shape that depends on data (" +
                               type.to_string() + "); the " + std::string(order_.front()->name()) +
                               " backend needs every shape to follow from the input shapes and the values of shape-carrying "
                               "inputs; compile with device='cpu'");
      plan->dims[i] = *sizes;
    }
  }
  // Each value within the limit before any size is added up or handed to a kernel.
  for (const Step& step : steps_)
    for (int o : step.outputs)
      if (o >= 0) {
        const ir::Value& v = *values_[static_cast<size_t>(o)].value;
        checked_value_bytes(*step.node, v.name(), v.type().dtype(), plan->dims[static_cast<size_t>(o)], max_memory_);
      }
  plan->device = space_->plan(plan->dims, capture);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.kernel == nullptr && !plan->device->on_device(s) && step.fallback == nullptr)
      step.fallback = host_fallback(step, plan->device->refused(s));
  }
  place_on_host(*plan);
  check_space_total(*plan);
  plan->device->realize();
  try {
    plan->host = ir::Buffer::allocate(plan->arena_bytes + plan->scratch_bytes + 64);
  } catch (const std::bad_alloc&) {
    throw MemoryLimitError("the host arena of a plan (" + std::to_string(plan->arena_bytes + plan->scratch_bytes) +
                           " bytes for values of host steps and their scratch) could not be allocated: the process did not "
                           "get the memory (the machine's, or an address-space limit), though within the session's " +
                           std::to_string(max_memory_) + " bytes (compile's max_memory)");
  }
  return plan;
}

// Host memory of a plan with a space: values host steps write (outputs aside: the caller's
// tensors) and values that come down for host steps get offsets in one arena by their
// lifetimes (one that comes down lives from the end of its stretch); host kernels' scratch
// follows it.
void Executor::place_on_host(Plan& plan) const {
  const SpacePlan& dev = *plan.device;
  const size_t n = values_.size();
  std::vector<int> stretch_end(steps_.size());
  for (const SpacePlan::Stretch& st : dev.stretches())
    for (int s = st.begin; s < st.end; ++s) stretch_end[static_cast<size_t>(s)] = st.end - 1;
  std::vector<bool> host_reads(n, false);
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (dev.on_device(s) || steps_[s].dims_only) continue;
    for (int in : steps_[s].inputs)
      if (in >= 0) host_reads[static_cast<size_t>(in)] = true;
  }
  std::vector<int> first(n, -1), last(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const ValueEntry& e = values_[i];
    if (e.producer < 0 || e.output >= 0 || dev.captured(i) || e.constant != nullptr) continue;
    const bool device = dev.on_device(static_cast<size_t>(e.producer));
    if (device && !host_reads[i]) continue;  // lives in the space only
    first[i] = device ? stretch_end[static_cast<size_t>(e.producer)] : e.producer;
    last[i] = first[i];
  }
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int in : steps_[s].inputs)
      // A device step reads a host value through the transfer at its stretch's start, before
      // the step itself: the value lives until then, which `s` covers.
      if (in >= 0 && first[static_cast<size_t>(in)] >= 0)
        last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], static_cast<int>(s));
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> placed;
  plan.offsets.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (first[i] < 0) continue;
    const auto bytes = ir::storage_bytes(values_[i].value->type().dtype(), ir::checked_num_elements(plan.dims[i]).value_or(0));
    lifetimes.push_back({std::max<int64_t>(bytes.value_or(0), 1), first[i], last[i]});
    placed.push_back(i);
  }
  const ArenaPlan arena = plan_arena(lifetimes);
  for (size_t k = 0; k < placed.size(); ++k) plan.offsets[placed[k]] = arena.offsets[k];
  plan.arena_bytes = arena.arena_bytes;
  plan.intermediate_bytes = arena.sum_bytes;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (dev.on_device(s)) continue;
    std::vector<View> ins, outs;
    for (int in : step.inputs)
      ins.push_back(in >= 0 ? View{values_[static_cast<size_t>(in)].value->type().dtype(), plan.dims[static_cast<size_t>(in)], nullptr}
                            : View{});
    for (int o : step.outputs)
      outs.push_back(o >= 0 ? View{values_[static_cast<size_t>(o)].value->type().dtype(), plan.dims[static_cast<size_t>(o)], nullptr}
                            : View{});
    const HostKernel& kernel = step.kernel != nullptr ? *step.kernel : *step.fallback;
    plan.scratch_bytes = std::max(plan.scratch_bytes, kernel.scratch_bytes(ins, outs));
  }
}

// A run may take max_memory bytes in all, host and device memory alike: the space's (its
// arena, scratch, staging), the host arena with the host kernels' scratch, the outputs and
// captured values it returns. Checked before the plan allocates any of them.
void Executor::check_space_total(const Plan& plan) const {
  int64_t returned = 0, largest = -1;
  size_t largest_value = 0;
  for (size_t i = 0; i < values_.size(); ++i) {
    const ValueEntry& e = values_[i];
    if (e.producer < 0) continue;
    const int64_t bytes =
        ir::storage_bytes(e.value->type().dtype(), ir::checked_num_elements(plan.dims[i]).value_or(0)).value_or(0);
    if (e.output >= 0 || plan.device->captured(i)) returned += bytes;
    if (bytes > largest) {
      largest = bytes;
      largest_value = i;
    }
  }
  const int64_t device = plan.device->device_bytes();
  const int64_t total = device + plan.arena_bytes + plan.scratch_bytes + returned;
  if (total <= max_memory_ || largest < 0) return;
  const ValueEntry& big = values_[largest_value];
  throw MemoryLimitError("a run with these input shapes would take " + std::to_string(total) + " bytes (" +
                         plan.device->device_bytes_text() + ", host arena and scratch " +
                         std::to_string(plan.arena_bytes + plan.scratch_bytes) + ", outputs " + std::to_string(returned) +
                         "; the largest value, output '" + big.value->name() + "' of " +
                         steps_[static_cast<size_t>(big.producer)].node->describe() + ", " +
                         dims_text(plan.dims[largest_value]) + ": " + std::to_string(largest) +
                         " bytes); a run of this session may take " + std::to_string(max_memory_) +
                         " bytes (compile's max_memory), host and device memory together");
}

std::vector<ir::Tensor> Executor::run_space(const std::vector<std::pair<std::string, ir::Tensor>>& named,
                                            const Watch* watch) const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  space_->check_usable();
  const std::vector<const ir::Tensor*> bound = bind_inputs(named);
  std::shared_ptr<Plan> held = space_plan_for(bound, watch != nullptr);
  Plan& plan = *held;
  SpacePlan& dev = *plan.device;

  const size_t n = values_.size();
  std::vector<ir::Tensor> outputs(outputs_.size());
  std::vector<ir::Tensor> captures(watch != nullptr ? n : 0);
  std::vector<void*> data(n, nullptr);
  std::byte* host = plan.host->mutable_data();
  auto storage = [](ir::Tensor& t) { return t.nbytes() == 0 ? static_cast<void*>(kEmptyData) : t.mutable_raw_data(); };
  // Within max_memory (the plan checked), yet the process may not get the memory (an
  // address-space limit, other processes): a typed error naming the value, not a bad_alloc.
  auto fresh = [&](size_t i, bool output) {
    const ValueEntry& e = values_[i];
    try {
      return output ? output_tensor(static_cast<size_t>(e.output), e.value->type().dtype(), plan.dims[i])
                    : ir::Tensor::zeros(e.value->type().dtype(), plan.dims[i]);
    } catch (const std::bad_alloc&) {
      const ir::DType dtype = e.value->type().dtype();
      throw MemoryLimitError(steps_[static_cast<size_t>(e.producer)].node->describe() + ": output '" + e.value->name() +
                             "' of shape " + dims_text(plan.dims[i]) + " (" + std::string(ir::dtype_name(dtype)) + ", " +
                             std::to_string(ir::storage_bytes(dtype, ir::checked_num_elements(plan.dims[i]).value_or(0)).value_or(0)) +
                             " bytes) could not be allocated: the process did not get the memory "
                             "(the machine's, or an address-space limit), though within the session's " +
                             std::to_string(max_memory_) + " bytes (compile's max_memory)");
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const ValueEntry& e = values_[i];
    if (e.slot == Slot::kInput) {
      data[i] = const_cast<void*>(bound[static_cast<size_t>(e.input)]->raw_data());
    } else if (e.constant != nullptr) {
      data[i] = e.constant->nbytes() == 0 ? static_cast<void*>(kEmptyData) : const_cast<void*>(e.constant->raw_data());
    } else if (e.producer >= 0) {
      if (e.output >= 0) {
        outputs[static_cast<size_t>(e.output)] = fresh(i, true);
        data[i] = storage(outputs[static_cast<size_t>(e.output)]);
      } else if (dev.captured(i)) {
        captures[i] = fresh(i, false);
        data[i] = storage(captures[i]);
      } else if (plan.offsets[i] >= 0) {
        data[i] = host + plan.offsets[i];
      }
    }
  }
  auto notify = [&](int v) {
    if (watch == nullptr || data[static_cast<size_t>(v)] == nullptr) return;
    const int slot = watch->slot[static_cast<size_t>(v)];
    if (slot < 0) return;
    const ir::Value& value = *values_[static_cast<size_t>(v)].value;
    (*watch->observer)(ObservedValue{static_cast<size_t>(slot), value.name(), value.type().dtype(),
                                     plan.dims[static_cast<size_t>(v)], data[static_cast<size_t>(v)]});
  };
  if (watch != nullptr && watch->inputs)
    for (int in : input_values_) notify(in);
  const RunContext ctx{pool_.get(), host + plan.arena_bytes};
  std::vector<std::pair<int, int64_t>> times;
  const std::vector<SpacePlan::Stretch>& stretches = dev.stretches();
  for (size_t k = 0; k < stretches.size(); ++k) {
    const SpacePlan::Stretch& st = stretches[k];
    InterruptScope::poll();  // between kernels and stretches; never while the device works on one
    if (!st.device) {
      for (int s = st.begin; s < st.end; ++s) {
        if (s > st.begin) InterruptScope::poll();
        const Step& step = steps_[static_cast<size_t>(s)];
        std::vector<View> ins, outs;
        for (int in : step.inputs) {
          const auto i = static_cast<size_t>(in);
          ins.push_back(in >= 0 ? View{values_[i].value->type().dtype(), plan.dims[i], data[i]} : View{});
        }
        for (int o : step.outputs) {
          const auto i = static_cast<size_t>(o);
          outs.push_back(o >= 0 ? View{values_[i].value->type().dtype(), plan.dims[i], data[i]} : View{});
        }
        const auto t0 = std::chrono::steady_clock::now();
        (step.kernel != nullptr ? *step.kernel : *step.fallback).run(ctx, ins, outs);
        if (profile_) {
          ++step.runs;
          step.nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        }
        for (int o : step.outputs)
          if (o >= 0) notify(o);
      }
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    times.clear();
    dev.run(k, data, times);
    if (profile_) {
      for (const auto& [s, ns] : times) {
        ++steps_[static_cast<size_t>(s)].runs;
        steps_[static_cast<size_t>(s)].nanoseconds += ns;
      }
      auto& [runs, ns] = stretch_time_[st.begin];
      ++runs;
      ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    }
    for (int s = st.begin; s < st.end; ++s)
      for (int o : steps_[static_cast<size_t>(s)].outputs)
        if (o >= 0) notify(o);
  }
  // Outputs no step writes (an input or a constant passed through), and outputs listed twice.
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const ValueEntry& e = values_[static_cast<size_t>(output_values_[k])];
    if (e.producer >= 0 && e.constant == nullptr && e.output == static_cast<int>(k)) continue;
    const ir::Tensor* src = e.slot == Slot::kInput ? bound[static_cast<size_t>(e.input)]
                            : e.constant != nullptr ? e.constant
                                                    : &outputs[static_cast<size_t>(e.output)];
    outputs[k] = src->dtype() == ir::DType::kString ? *src : ir::Tensor::copy_of(src->dtype(), src->dims(), src->raw_data(), src->nbytes());
  }
  return outputs;
}

// Host steps by node (wall time); each device stretch as one entry (op type "<backend>:segment":
// the wall time of its transfers, submission and wait) followed by its steps, each with its
// time on the device where the device timed it. Steps no run dispatched have no entry.
std::vector<NodeProfile> Executor::space_profile() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  std::vector<NodeProfile> out;
  const std::string space(order_.front()->name());
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    const bool device = step.kernel == nullptr;
    if (device)
      if (auto it = stretch_time_.find(static_cast<int>(s)); it != stretch_time_.end()) {
        size_t end = s;
        while (end < steps_.size() && steps_[end].kernel == nullptr) ++end;
        out.push_back({space + ": " + std::to_string(end - s) + " kernels from " + step.node->name(), space + ":segment",
                       it->second.first, static_cast<double>(it->second.second) * 1e-9});
      }
    // A space step some plan ran on the host (shapes its kernel refused) has wall time too.
    if (!device || step.fallback != nullptr || (space_->profiled(*step.owned) && step.runs.load() > 0))
      out.push_back({step.node->name(), qualified_op(*step.node), step.runs.load(), static_cast<double>(step.nanoseconds.load()) * 1e-9});
  }
  return out;
}

}  // namespace tether::engine::exec
