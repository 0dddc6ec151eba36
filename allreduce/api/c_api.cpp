// The C API (hvd/hvd.h): the C++ API with exceptions turned into a status and a per-thread
// last-error message.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "hvd/elastic.hpp"
#include "hvd/hvd.h"
#include "hvd/hvd.hpp"

// The opaque state of the C API: a BufferState.
struct hvd_elastic_state {
  hvd::elastic::BufferState state;
};

namespace {

thread_local std::string last_error;
thread_local std::string backend;  // keeps hvd_backend_name()'s string alive

template <class Body>
hvd_status guarded(Body&& body) {
  try {
    body();
    return HVD_OK;
  } catch (const hvd::RuntimeError& e) {
    last_error = e.what();
    return e.status();
  } catch (const hvd::elastic::HostsUpdatedInterrupt& e) {
    last_error = e.what();
    return HVD_HOSTS_UPDATED;
  } catch (const std::exception& e) {
    last_error = e.what();
    return HVD_ERR_INTERNAL;
  }
}

hvd_status bad_argument(const char* what) {
  last_error = what;
  return HVD_ERR_INVALID_ARGUMENT;
}

hvd::Tensor flat(const void* data, size_t count, hvd_dtype dtype) {
  return hvd::Tensor{const_cast<void*>(data),
                     static_cast<hvd::DataType>(dtype),
                     {static_cast<std::int64_t>(count)}};
}

hvd::Allocator c_allocator(hvd_alloc_fn alloc, void* user, size_t* out_count) {
  return [=](const std::vector<std::int64_t>& shape, size_t bytes) -> void* {
    *out_count = static_cast<size_t>(shape.at(0));
    return alloc(bytes, user);
  };
}

template <class F>
hvd_status topology(int* out, F getter) {
  if (out == nullptr) return bad_argument("the output pointer is NULL");
  return guarded([&] { *out = getter(); });
}

}  // namespace

extern "C" {

hvd_status hvd_init(void) {
  return guarded([] { hvd::init(); });
}
hvd_status hvd_shutdown(void) {
  return guarded([] { hvd::shutdown(); });
}
int hvd_is_initialized(void) { return hvd::is_initialized() ? 1 : 0; }

hvd_status hvd_rank(int* out) { return topology(out, hvd::rank); }
hvd_status hvd_size(int* out) { return topology(out, hvd::size); }
hvd_status hvd_local_rank(int* out) { return topology(out, hvd::local_rank); }
hvd_status hvd_local_size(int* out) { return topology(out, hvd::local_size); }
hvd_status hvd_cross_rank(int* out) { return topology(out, hvd::cross_rank); }
hvd_status hvd_cross_size(int* out) { return topology(out, hvd::cross_size); }
hvd_status hvd_gpu_device(int* out) { return topology(out, hvd::gpu_device); }

const char* hvd_backend_name(void) {
  if (!hvd::is_initialized()) return nullptr;
  if (guarded([] { backend = hvd::backend_name(); }) != HVD_OK) return nullptr;
  return backend.c_str();
}

hvd_status hvd_allreduce(const void* in, void* out, size_t count, hvd_dtype dtype, hvd_op op,
                         double prescale, double postscale) {
  return hvd_allreduce_on(0, in, out, count, dtype, op, prescale, postscale);
}

hvd_status hvd_broadcast(void* data, size_t count, hvd_dtype dtype, int root) {
  return hvd_broadcast_on(0, data, count, dtype, root);
}

hvd_status hvd_allgather(const void* in, size_t count, hvd_dtype dtype, hvd_alloc_fn alloc,
                         void* user, size_t* out_count) {
  return hvd_allgather_on(0, in, count, dtype, alloc, user, out_count);
}

hvd_status hvd_reducescatter(const void* in, size_t count, hvd_dtype dtype, hvd_op op,
                             hvd_alloc_fn alloc, void* user, size_t* out_count) {
  return hvd_reducescatter_on(0, in, count, dtype, op, 1.0, 1.0, alloc, user, out_count);
}

hvd_status hvd_reducescatter_scaled(const void* in, size_t count, hvd_dtype dtype, hvd_op op,
                                    double prescale, double postscale, hvd_alloc_fn alloc,
                                    void* user, size_t* out_count) {
  return hvd_reducescatter_on(0, in, count, dtype, op, prescale, postscale, alloc, user, out_count);
}

hvd_status hvd_alltoall(const void* in, size_t count, const int64_t* splits, hvd_dtype dtype,
                        hvd_alloc_fn alloc, void* user, size_t* out_count, int64_t* recv_splits) {
  return hvd_alltoall_on(0, in, count, splits, dtype, alloc, user, out_count, recv_splits);
}

hvd_status hvd_barrier(void) { return hvd_barrier_on(0); }

// ---- Process sets ----

hvd_status hvd_init_process_sets(const int* ranks, const int* set_sizes, int num_sets,
                                 int dynamic) {
  if (num_sets < 0 || (num_sets > 0 && (ranks == nullptr || set_sizes == nullptr))) {
    return bad_argument("hvd_init_process_sets: ranks and set_sizes must hold num_sets sets");
  }
  hvd::InitOptions options;
  options.dynamic_process_sets = dynamic != 0;
  std::size_t at = 0;
  for (int i = 0; i < num_sets; ++i) {
    if (set_sizes[i] < 0) return bad_argument("hvd_init_process_sets: a negative set size");
    options.process_sets.emplace_back(ranks + at, ranks + at + set_sizes[i]);
    at += static_cast<std::size_t>(set_sizes[i]);
  }
  return guarded([&] { hvd::init(options); });
}

hvd_status hvd_add_process_set(const int* ranks, int count, int* out_id) {
  if (out_id == nullptr || count < 0 || (count > 0 && ranks == nullptr)) {
    return bad_argument("hvd_add_process_set: ranks must hold count ranks, out_id not NULL");
  }
  return guarded([&] {
    *out_id = hvd::add_process_set(std::span<const int>(ranks, static_cast<size_t>(count))).id();
  });
}

hvd_status hvd_remove_process_set(int id) {
  return guarded([&] { hvd::remove_process_set(hvd::ProcessSet(id)); });
}

hvd_status hvd_process_set_rank(int id, int* out) {
  return topology(out, [id] { return hvd::ProcessSet(id).rank(); });
}

hvd_status hvd_process_set_size(int id, int* out) {
  return topology(out, [id] { return hvd::ProcessSet(id).size(); });
}

hvd_status hvd_process_set_ranks(int id, int* ranks, int capacity, int* out_count) {
  if (out_count == nullptr || (capacity > 0 && ranks == nullptr)) {
    return bad_argument("hvd_process_set_ranks: out_count is NULL, or ranks with a capacity");
  }
  return guarded([&] {
    const std::vector<int> all = hvd::ProcessSet(id).ranks();
    *out_count = static_cast<int>(all.size());
    std::copy_n(all.begin(), std::min<std::size_t>(all.size(), std::max(capacity, 0)), ranks);
  });
}

hvd_status hvd_process_set_ids(int* ids, int capacity, int* out_count) {
  if (out_count == nullptr || (capacity > 0 && ids == nullptr)) {
    return bad_argument("hvd_process_set_ids: out_count is NULL, or ids with a capacity");
  }
  return guarded([&] {
    const std::vector<hvd::ProcessSet> sets = hvd::process_sets();
    *out_count = static_cast<int>(sets.size());
    for (std::size_t i = 0; i < sets.size() && i < static_cast<std::size_t>(std::max(capacity, 0));
         ++i) {
      ids[i] = sets[i].id();
    }
  });
}

hvd_status hvd_allreduce_on(int set, const void* in, void* out, size_t count, hvd_dtype dtype,
                            hvd_op op, double prescale, double postscale) {
  return guarded([&] {
    hvd::allreduce(flat(in, count, dtype), flat(out, count, dtype),
                   hvd::AllreduceOptions{static_cast<hvd::ReduceOp>(op), prescale, postscale},
                   hvd::ProcessSet(set));
  });
}

hvd_status hvd_grouped_allreduce(const void* const* in, void* const* out, const size_t* counts,
                                 int num, hvd_dtype dtype, hvd_op op, double prescale,
                                 double postscale) {
  return hvd_grouped_allreduce_on(0, in, out, counts, num, dtype, op, prescale, postscale);
}

hvd_status hvd_grouped_allreduce_on(int set, const void* const* in, void* const* out,
                                    const size_t* counts, int num, hvd_dtype dtype, hvd_op op,
                                    double prescale, double postscale) {
  if (num < 0 || (num > 0 && (in == nullptr || out == nullptr || counts == nullptr))) {
    return bad_argument(
        "hvd_grouped_allreduce: num must not be negative, and in, out and counts must not be "
        "NULL");
  }
  return guarded([&] {
    std::vector<hvd::Tensor> ins, outs;
    for (int i = 0; i < num; ++i) {
      ins.push_back(flat(in[i], counts[i], dtype));
      outs.push_back(flat(out[i], counts[i], dtype));
    }
    // An empty name: named automatically, as the synchronous calls are.
    const auto handles = hvd::grouped_allreduce_async(
        {}, ins, outs, hvd::AllreduceOptions{static_cast<hvd::ReduceOp>(op), prescale, postscale},
        hvd::ProcessSet(set));
    for (const hvd::Handle& h : handles) h.wait();
  });
}

hvd_status hvd_broadcast_on(int set, void* data, size_t count, hvd_dtype dtype, int root) {
  return guarded([&] { hvd::broadcast(flat(data, count, dtype), root, hvd::ProcessSet(set)); });
}

hvd_status hvd_allgather_on(int set, const void* in, size_t count, hvd_dtype dtype,
                            hvd_alloc_fn alloc, void* user, size_t* out_count) {
  if (alloc == nullptr || out_count == nullptr) {
    return bad_argument("hvd_allgather: alloc and out_count must not be NULL");
  }
  return guarded([&] {
    hvd::allgather(flat(in, count, dtype), c_allocator(alloc, user, out_count),
                   hvd::ProcessSet(set));
  });
}

hvd_status hvd_reducescatter_on(int set, const void* in, size_t count, hvd_dtype dtype, hvd_op op,
                                double prescale, double postscale, hvd_alloc_fn alloc, void* user,
                                size_t* out_count) {
  if (alloc == nullptr || out_count == nullptr) {
    return bad_argument("hvd_reducescatter: alloc and out_count must not be NULL");
  }
  return guarded([&] {
    hvd::reducescatter(flat(in, count, dtype), c_allocator(alloc, user, out_count),
                       static_cast<hvd::ReduceOp>(op), prescale, postscale, hvd::ProcessSet(set));
  });
}

hvd_status hvd_alltoall_on(int set, const void* in, size_t count, const int64_t* splits,
                           hvd_dtype dtype, hvd_alloc_fn alloc, void* user, size_t* out_count,
                           int64_t* recv_splits) {
  if (alloc == nullptr || out_count == nullptr) {
    return bad_argument("hvd_alltoall: alloc and out_count must not be NULL");
  }
  return guarded([&] {
    const hvd::ProcessSet ps(set);
    std::vector<std::int64_t> send;
    if (splits != nullptr) send.assign(splits, splits + (set == 0 ? hvd::size() : ps.size()));
    const auto received =
        hvd::alltoall(flat(in, count, dtype), send, c_allocator(alloc, user, out_count), ps);
    if (recv_splits != nullptr) std::copy(received.begin(), received.end(), recv_splits);
  });
}

hvd_status hvd_join(int* last_rank) {
  return guarded([&] {
    const int last = hvd::join();
    if (last_rank != nullptr) *last_rank = last;
  });
}

hvd_status hvd_barrier_on(int set) {
  return guarded([&] { hvd::barrier(hvd::ProcessSet(set)); });
}

hvd_status hvd_start_timeline(const char* file_path, int mark_cycles) {
  if (file_path == nullptr) return bad_argument("hvd_start_timeline: file_path must not be NULL");
  return guarded([&] { hvd::start_timeline(file_path, mark_cycles != 0); });
}

hvd_status hvd_stop_timeline(void) {
  return guarded([] { hvd::stop_timeline(); });
}

const char* hvd_last_error(void) { return last_error.c_str(); }

const char* hvd_status_name(hvd_status status) {
  switch (status) {
    case HVD_OK:
      return "HVD_OK";
    case HVD_ERR_NOT_INITIALIZED:
      return "HVD_ERR_NOT_INITIALIZED";
    case HVD_ERR_INVALID_ARGUMENT:
      return "HVD_ERR_INVALID_ARGUMENT";
    case HVD_ERR_UNSUPPORTED:
      return "HVD_ERR_UNSUPPORTED";
    case HVD_ERR_CONFIG:
      return "HVD_ERR_CONFIG";
    case HVD_ERR_BACKEND:
      return "HVD_ERR_BACKEND";
    case HVD_ERR_TIMEOUT:
      return "HVD_ERR_TIMEOUT";
    case HVD_ERR_INTERNAL:
      return "HVD_ERR_INTERNAL";
    case HVD_ERR_PEER_LOST:
      return "HVD_ERR_PEER_LOST";
    case HVD_HOSTS_UPDATED:
      return "HVD_HOSTS_UPDATED";
    case HVD_ERR_REMOVED:
      return "HVD_ERR_REMOVED";
  }
  return "HVD_ERR_UNKNOWN";
}

hvd_status hvd_elastic_state_new(hvd_elastic_state** out) {
  if (out == nullptr) return bad_argument("hvd_elastic_state_new: the output pointer is NULL");
  return guarded([&] { *out = new hvd_elastic_state; });
}

void hvd_elastic_state_free(hvd_elastic_state* state) { delete state; }

hvd_status hvd_elastic_state_add(hvd_elastic_state* state, const char* name, void* data,
                                 size_t bytes) {
  if (state == nullptr || name == nullptr || (data == nullptr && bytes > 0)) {
    return bad_argument("hvd_elastic_state_add: NULL state, name or data");
  }
  return guarded([&] { state->state.add(name, data, bytes); });
}

hvd_status hvd_elastic_commit(hvd_elastic_state* state) {
  if (state == nullptr) return bad_argument("hvd_elastic_commit: the state is NULL");
  return guarded([&] { state->state.commit(); });
}

hvd_status hvd_elastic_run(hvd_elastic_state* state, int (*fn)(void* user), void* user) {
  if (state == nullptr || fn == nullptr) {
    return bad_argument("hvd_elastic_run: the state or the function is NULL");
  }
  // The function's statuses become what hvd::elastic::run() reacts to: PEER_LOST and
  // HOSTS_UPDATED reset, anything else ends the run with that status and the message the failed
  // call left in hvd_last_error().
  struct Returned {  // not a std::exception: guarded() lets it through
    int status;
  };
  try {
    return guarded([&] {
      hvd::elastic::run(state->state, [&] {
        const int rc = fn(user);
        if (rc == HVD_OK) return;
        if (rc == HVD_HOSTS_UPDATED) throw hvd::elastic::HostsUpdatedInterrupt();
        if (rc == HVD_ERR_PEER_LOST) {
          throw hvd::RuntimeError(HVD_ERR_PEER_LOST,
                                  last_error.empty() ? "a peer was lost" : last_error);
        }
        throw Returned{rc};
      });
    });
  } catch (const Returned& r) {
    return static_cast<hvd_status>(r.status);
  }
}

hvd_status hvd_elastic_world(int* generation, int* worker, int* resets) {
  return guarded([&] {
    const hvd::elastic::WorldInfo w = hvd::elastic::world();
    if (generation != nullptr) *generation = w.generation;
    if (worker != nullptr) *worker = w.worker;
    if (resets != nullptr) *resets = w.resets;
  });
}

}  // extern "C"
