// The public C++ API (hvd/hvd.hpp) over one process-wide Runtime.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "allreduce/api/boundary.h"
#include "allreduce/api/process_state.h"
#include "allreduce/backends/gpu.h"
#include "allreduce/engine/op_state.h"
#include "allreduce/runtime/runtime.h"
#include "hvd/build_config.h"
#include "hvd/hvd.hpp"

namespace hvd {

api_detail::ProcessState& api_detail::process_state() {
  static ProcessState p;
  return p;
}

namespace {

using runtime::Runtime;
using Process = api_detail::ProcessState;
Process& process() { return api_detail::process_state(); }

std::shared_ptr<Runtime> current(const char* call) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.runtime) {
    throw RuntimeError(HVD_ERR_NOT_INITIALIZED,
                       p.shut_down ? fmt::format("hvd::{}() called after hvd::shutdown()", call)
                                   : fmt::format("hvd::{}() called before hvd::init()", call));
  }
  return p.runtime;
}

// The runtime of process set `set` (process_sets.cpp says which errors).
std::shared_ptr<Runtime> current(const char* call, const ProcessSet& set) {
  if (set.id() == 0) return current(call);
  return api_detail::set_runtime(call, set.id());
}

}  // namespace

void init() { init(InitOptions{}); }

void init(const InitOptions& options) {
  runtime::at_boundary([&] {
    Process& p = process();
    std::unique_lock<std::mutex> lock(p.mutex);
    if (p.runtime) return;
    auto config = runtime::read_config([](const char* name) { return std::getenv(name); },
                                       runtime::BuildFacts{.has_mpi = HVD_BUILD_HAS_MPI != 0,
                                                           .has_gloo = HVD_BUILD_HAS_GLOO != 0});
    if (p.init_rounds > 0) config.gloo_scope += fmt::format(".r{}", p.init_rounds);
    // A worker started for a later generation of an elastic job: the world it joins says whose
    // state it syncs from.
    const bool joining = config.elastic.fd >= 0 && config.elastic.generation > 0;
    const std::optional<contract::WorldDoc> first =
        joining ? std::optional(api_detail::elastic_first_world(config, config.elastic.generation))
                : std::nullopt;
    p.runtime = std::make_shared<Runtime>(config);
    ++p.init_rounds;
    // A new runtime negotiates afresh: a process-set call one rank made in the last one and
    // another did not (interrupted, or never reached) must not shift every later call's name.
    p.set_calls = 0;
    // At exit, stop a runtime the program left running before anything it uses is torn down
    // (registered after the backend's own exit handlers, e.g. MPI's finalisation, so it runs
    // before them).
    static const bool stop_at_exit = std::atexit([] { shutdown(); }) == 0;
    (void)stop_at_exit;
    p.shut_down = false;
    p.config = config;
    p.generation = p.announced = config.elastic.generation;
    p.sync_root = first ? first->sync_root : 0;
    p.master_addr = first ? first->master_addr : config.master_addr;
    p.master_port = first ? first->master_port : config.master_port;
    if (joining) api_detail::elastic_joined(config, config.elastic.generation);
    p.dynamic_sets = options.dynamic_process_sets || config.dynamic_process_sets;
    lock.unlock();
    // Static sets: made as add_process_set makes them (every rank checks the others' lists).
    for (const std::vector<int>& ranks : options.process_sets) {
      api_detail::make_process_set(ranks, true);
    }
  });
}

void shutdown() {
  std::shared_ptr<Runtime> last;
  std::vector<std::shared_ptr<Runtime>> sets;
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.runtime) return;
    last = std::move(p.runtime);
    p.shut_down = true;
    // The sets go first, in id order on every rank (each says goodbye among its own ranks).
    for (auto& [id, entry] : p.sets) sets.push_back(std::move(entry.runtime));
    p.sets.clear();
  }
  sets.clear();
  // `last` is destroyed here, or by the last op still running on another thread.
}

bool is_initialized() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.runtime != nullptr;
}

int rank() { return current("rank")->topology().rank; }
int size() { return current("size")->topology().size; }
int local_rank() { return current("local_rank")->topology().local_rank; }
int local_size() { return current("local_size")->topology().local_size; }
int cross_rank() { return current("cross_rank")->topology().cross_rank; }
int cross_size() { return current("cross_size")->topology().cross_size; }
std::string backend_name() { return std::string(current("backend_name")->backend_name()); }
EngineStats engine_stats(const ProcessSet& set) {
  return current("engine_stats", set)->engine_stats();
}

void start_timeline(const std::string& file_path, bool mark_cycles) {
  const std::shared_ptr<Runtime> rt = current("start_timeline");
  runtime::at_boundary([&] { rt->start_timeline(file_path, mark_cycles); });
}

void stop_timeline() {
  const std::shared_ptr<Runtime> rt = current("stop_timeline");
  runtime::at_boundary([&] { rt->stop_timeline(); });
}
int gpu_device() {
  const int local = current("gpu_device")->topology().local_rank;
  return runtime::choose_device(local, runtime::gpu_facts().devices);
}

// ---- Ops: every one goes through the engine ----

struct HandleAccess {
  static Handle make(std::shared_ptr<detail::OpState> state) {
    Handle h;
    h.state_ = std::move(state);
    return h;
  }
  static detail::OpState& state(const Handle& h) {
    if (!h.state_) throw RuntimeError(HVD_ERR_INVALID_ARGUMENT, "this hvd::Handle holds no op");
    return *h.state_;
  }
};

namespace {

using detail::OpState;
using runtime::OpKind;

// An Allocator that fills `buffer` (shape and bytes) for the Buffer-returning forms.
Allocator into(Buffer& buffer, DataType dtype) {
  buffer.dtype = dtype;
  return [&buffer](const std::vector<std::int64_t>& shape, std::size_t bytes) -> void* {
    buffer.shape = shape;
    buffer.bytes.resize(bytes);
    return buffer.bytes.data();
  };
}

// An op of `kind` on `in`, writing to `out` (nullptr: in place); with no `allocate`, an output
// of unknown size goes to the op's own Buffer (host memory).
std::shared_ptr<OpState> make_op(OpKind kind, const std::string& name, const Tensor& in,
                                 Allocator allocate = {}, const Tensor* out = nullptr) {
  auto op = std::make_shared<OpState>();
  op->request.kind = kind;
  op->request.name = name;
  op->in = in;
  // In place (the usual allreduce): no second copy of the tensor and its shape.
  op->out_is_in = out == nullptr || out == &in ||
                  (out->data == in.data && out->dtype == in.dtype && out->device == in.device &&
                   out->stream == in.stream && out->shape == in.shape);
  if (!op->out_is_in) op->out = *out;
  const bool sized_later =
      kind == OpKind::kAllgather || kind == OpKind::kReducescatter || kind == OpKind::kAlltoall;
  if (sized_later && !allocate) {
    op->allocate = into(op->buffer, in.dtype);
    op->output_in_buffer = true;
  } else {
    op->allocate = std::move(allocate);
  }
  return op;
}

// Submits `op` to the current runtime, named automatically when it has no name (the synchronous
// calls). `now`: the caller waits at once, so the batch goes out without the cycle time.
Handle start(const char* call, std::shared_ptr<OpState> op, bool now, const ProcessSet& set) {
  std::shared_ptr<Runtime> rt = current(call, set);
  if (op->request.kind == OpKind::kBroadcast && set.id() != 0) {
    op->request.root = api_detail::set_root(call, *rt, op->request.root);
  }
  if (op->request.name.empty()) op->request.name = rt->auto_name(op->request.kind);
  op->runtime = rt;
  runtime::at_boundary([&] { rt->submit(op, now); });
  return HandleAccess::make(std::move(op));  // the caller's reference: no count up and down
}

}  // namespace

const std::string& Handle::name() const { return HandleAccess::state(*this).request.name; }

bool Handle::poll() const { return HandleAccess::state(*this).finished(); }

namespace {
// Someone waits on an op not yet done: no point batching any longer, and the engine may move the
// op on in this thread (OpEngine::wait). Outside the op's lock: the runtime reference may be the
// last, whose destruction fails (locks) the ops still pending.
void wait_in_engine(OpState& s, runtime::Clock::time_point deadline) {
  if (auto rt = s.runtime.lock()) rt->wait(s, deadline);
}
}  // namespace

bool Handle::wait(std::chrono::milliseconds timeout) const {
  OpState& s = HandleAccess::state(*this);
  if (!s.finished()) {
    const auto now = runtime::Clock::now();
    wait_in_engine(s, timeout >= std::chrono::hours(24 * 365) ? runtime::Clock::time_point::max()
                                                              : now + timeout);
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.cv.wait_for(lock, timeout, [&] { return s.done.load(std::memory_order_relaxed); })) {
      return false;
    }
  }
  if (s.error) std::rethrow_exception(s.error);
  return true;
}

void Handle::wait() const {
  OpState& s = HandleAccess::state(*this);
  if (!s.finished()) {
    wait_in_engine(s, runtime::Clock::time_point::max());
    std::unique_lock<std::mutex> lock(s.mutex);
    s.cv.wait(lock, [&] { return s.done.load(std::memory_order_relaxed); });
  }
  if (s.error) std::rethrow_exception(s.error);
}

const Buffer& Handle::output() const { return HandleAccess::state(*this).buffer; }

Buffer Handle::take_output() const {
  OpState& s = HandleAccess::state(*this);
  if (!s.finished()) {
    throw RuntimeError(HVD_ERR_INVALID_ARGUMENT,
                       fmt::format("hvd::Handle::take_output(): op '{}' has not finished: call "
                                   "wait() first",
                                   s.request.name));
  }
  Buffer out = std::move(s.buffer);
  s.buffer = Buffer{out.dtype, {}, {}};
  return out;
}

const std::vector<std::int64_t>& Handle::received_splits() const {
  return HandleAccess::state(*this).received_splits;
}

namespace {
std::shared_ptr<OpState> allreduce_op(const std::string& name, const Tensor& in, const Tensor& out,
                                      const AllreduceOptions& options) {
  auto op = make_op(OpKind::kAllreduce, name, in, {}, &out);
  op->options = options;
  return op;
}
std::shared_ptr<OpState> broadcast_op(const std::string& name, const Tensor& inout, int root) {
  auto op = make_op(OpKind::kBroadcast, name, inout);
  op->request.root = root;
  return op;
}
std::shared_ptr<OpState> reducescatter_op(const std::string& name, const Tensor& in,
                                          const AllreduceOptions& options,
                                          Allocator allocate = {}) {
  auto op = make_op(OpKind::kReducescatter, name, in, std::move(allocate));
  op->options = options;
  return op;
}
std::shared_ptr<OpState> alltoall_op(const std::string& name, const Tensor& in,
                                     std::span<const std::int64_t> splits,
                                     Allocator allocate = {}) {
  auto op = make_op(OpKind::kAlltoall, name, in, std::move(allocate));
  op->splits.assign(splits.begin(), splits.end());
  return op;
}
}  // namespace

Handle allreduce_async(const std::string& name, const Tensor& in, const Tensor& out,
                       const AllreduceOptions& options, const ProcessSet& set) {
  return start("allreduce_async", allreduce_op(name, in, out, options), false, set);
}

Handle broadcast_async(const std::string& name, const Tensor& inout, int root,
                       const ProcessSet& set) {
  return start("broadcast_async", broadcast_op(name, inout, root), false, set);
}

Handle allgather_async(const std::string& name, const Tensor& in, const ProcessSet& set) {
  return start("allgather_async", make_op(OpKind::kAllgather, name, in), false, set);
}

Handle reducescatter_async(const std::string& name, const Tensor& in, ReduceOp op_kind,
                           double prescale, double postscale, const ProcessSet& set) {
  return start("reducescatter_async", reducescatter_op(name, in, {op_kind, prescale, postscale}),
               false, set);
}

Handle alltoall_async(const std::string& name, const Tensor& in,
                      std::span<const std::int64_t> splits, const ProcessSet& set) {
  return start("alltoall_async", alltoall_op(name, in, splits), false, set);
}

// ---- The synchronous forms: submit under an automatic name, then wait ----

void allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options,
               const ProcessSet& set) {
  start("allreduce", allreduce_op({}, in, out, options), true, set).wait();
}

void broadcast(const Tensor& inout, int root, const ProcessSet& set) {
  start("broadcast", broadcast_op({}, inout, root), true, set).wait();
}

void allgather(const Tensor& in, const Allocator& allocate, const ProcessSet& set) {
  start("allgather", make_op(OpKind::kAllgather, {}, in, allocate), true, set).wait();
}

Buffer allgather(const Tensor& in, const ProcessSet& set) {
  Handle h = start("allgather", make_op(OpKind::kAllgather, {}, in), true, set);
  h.wait();
  return std::move(HandleAccess::state(h).buffer);
}

void reducescatter(const Tensor& in, const Allocator& allocate, ReduceOp op_kind, double prescale,
                   double postscale, const ProcessSet& set) {
  start("reducescatter", reducescatter_op({}, in, {op_kind, prescale, postscale}, allocate), true,
        set)
      .wait();
}

Buffer reducescatter(const Tensor& in, ReduceOp op, double prescale, double postscale,
                     const ProcessSet& set) {
  Handle h = start("reducescatter", reducescatter_op({}, in, {op, prescale, postscale}), true, set);
  h.wait();
  return std::move(HandleAccess::state(h).buffer);
}

std::vector<std::int64_t> alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                   const Allocator& allocate, const ProcessSet& set) {
  Handle h = start("alltoall", alltoall_op({}, in, splits, allocate), true, set);
  h.wait();
  return HandleAccess::state(h).received_splits;
}

AlltoallResult alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                        const ProcessSet& set) {
  Handle h = start("alltoall", alltoall_op({}, in, splits), true, set);
  h.wait();
  auto& s = HandleAccess::state(h);
  return AlltoallResult{std::move(s.buffer), s.received_splits};
}

// ---- Grouped ops: one group, submitted and negotiated as one unit ----

namespace {
// Names the group's ops "<base>_<i>of<n>" (base: `name`, or an automatic name), submits them
// together to the set's runtime and waits for none.
std::vector<Handle> start_group(const char* call, std::vector<std::shared_ptr<OpState>> ops,
                                const std::string& name, bool now, const ProcessSet& set) {
  std::shared_ptr<Runtime> rt = current(call, set);
  if (ops.empty()) return {};
  const std::string base = name.empty() ? rt->auto_name(ops.front()->request.kind) : name;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i]->request.name = runtime::group_member_name(base, i, ops.size());
    ops[i]->runtime = rt;
  }
  runtime::at_boundary([&] { rt->submit_group(ops, now, base); });
  std::vector<Handle> handles;
  handles.reserve(ops.size());
  for (auto& op : ops) handles.push_back(HandleAccess::make(std::move(op)));
  return handles;
}

void wait_all(const std::vector<Handle>& handles) {
  for (const Handle& h : handles) h.wait();
}

std::vector<Buffer> take_buffers(const std::vector<Handle>& handles) {
  wait_all(handles);
  std::vector<Buffer> out;
  out.reserve(handles.size());
  for (const Handle& h : handles) out.push_back(std::move(HandleAccess::state(h).buffer));
  return out;
}

std::vector<std::shared_ptr<OpState>> allreduce_ops(std::span<const Tensor> in,
                                                    std::span<const Tensor> out,
                                                    const AllreduceOptions& options) {
  if (in.size() != out.size()) {
    throw RuntimeError(
        HVD_ERR_INVALID_ARGUMENT,
        fmt::format("hvd::grouped_allreduce: {} inputs but {} outputs", in.size(), out.size()));
  }
  std::vector<std::shared_ptr<OpState>> ops;
  for (std::size_t i = 0; i < in.size(); ++i) {
    ops.push_back(allreduce_op({}, in[i], out[i], options));
  }
  return ops;
}

std::vector<std::shared_ptr<OpState>> allgather_ops(std::span<const Tensor> in) {
  std::vector<std::shared_ptr<OpState>> ops;
  for (const Tensor& t : in) ops.push_back(make_op(OpKind::kAllgather, {}, t));
  return ops;
}

std::vector<std::shared_ptr<OpState>> reducescatter_ops(std::span<const Tensor> in,
                                                        const AllreduceOptions& options) {
  std::vector<std::shared_ptr<OpState>> ops;
  for (const Tensor& t : in) ops.push_back(reducescatter_op({}, t, options));
  return ops;
}
}  // namespace

std::vector<Handle> grouped_allreduce_async(const std::string& name, std::span<const Tensor> in,
                                            std::span<const Tensor> out,
                                            const AllreduceOptions& options,
                                            const ProcessSet& set) {
  return start_group("grouped_allreduce_async", allreduce_ops(in, out, options), name, false, set);
}

std::vector<Handle> grouped_allgather_async(const std::string& name, std::span<const Tensor> in,
                                            const ProcessSet& set) {
  return start_group("grouped_allgather_async", allgather_ops(in), name, false, set);
}

std::vector<Handle> grouped_reducescatter_async(const std::string& name, std::span<const Tensor> in,
                                                ReduceOp op, double prescale, double postscale,
                                                const ProcessSet& set) {
  return start_group("grouped_reducescatter_async",
                     reducescatter_ops(in, {op, prescale, postscale}), name, false, set);
}

void grouped_allreduce(std::span<const Tensor> inout, const AllreduceOptions& options,
                       const ProcessSet& set) {
  wait_all(start_group("grouped_allreduce", allreduce_ops(inout, inout, options), {}, true, set));
}

std::vector<Buffer> grouped_allgather(std::span<const Tensor> in, const ProcessSet& set) {
  return take_buffers(start_group("grouped_allgather", allgather_ops(in), {}, true, set));
}

std::vector<Buffer> grouped_reducescatter(std::span<const Tensor> in, ReduceOp op, double prescale,
                                          double postscale, const ProcessSet& set) {
  return take_buffers(start_group("grouped_reducescatter",
                                  reducescatter_ops(in, {op, prescale, postscale}), {}, true, set));
}

int join() {
  const std::shared_ptr<Runtime> rt = current("join");
  const bool first = runtime::at_boundary([&] { return rt->start_join(); });
  if (!first) {
    throw RuntimeError(HVD_ERR_INVALID_ARGUMENT,
                       "hvd::join() was called again on this rank while its first call waits: "
                       "a rank joins once per round, from one thread");
  }
  struct Done {
    Runtime& rt;
    ~Done() { rt.end_join(); }
  } done{*rt};
  Handle h = start("join", make_op(OpKind::kJoin, {}, Tensor{nullptr, DataType::kUInt8, {0}}), true,
                   ProcessSet());
  h.wait();
  const auto& last = HandleAccess::state(h).received_splits;
  return last.empty() ? -1 : static_cast<int>(last.front());
}

void barrier(const ProcessSet& set) {
  start("barrier", make_op(OpKind::kBarrier, {}, Tensor{nullptr, DataType::kUInt8, {0}}), true, set)
      .wait();
}

}  // namespace hvd
