#include "allreduce/backends/gloo_backend.h"

#include <gloo/common/error.h>

#include <fmt/format.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/kernels/kernels.h"
#include "common/signal_fd.h"

namespace hvd::runtime {
namespace {

bool is_timeout(const std::string& what) {
  return what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
}

// Gloo's typed setters only use sizeof(T): pick an unsigned type of the element's size.
template <class F>
void with_element_type(DataType dtype, F&& f) {
  switch (element_size(dtype)) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    default:
      return f(std::uint64_t{});
  }
}

// The reduction Gloo's halving-doubling calls (x = x op y) is a plain function pointer: it reads
// the kernel of the allreduce in progress on this thread (GlooBackend::sync_allreduce).
thread_local ReduceFn t_sync_reduce = nullptr;
template <class T>
void sync_reduce(T* x, const T* y, std::size_t n) {
  t_sync_reduce(x, x, y, n);
}

// net.core.wmem_max: the largest send buffer a socket may ask for (Gloo asks for the message's
// size; the kernel doubles what it grants). Linux's default where /proc cannot say.
std::size_t wmem_max() {
  std::ifstream in("/proc/sys/net/core/wmem_max");
  long long v = 0;
  if (in >> v && v >= 4096) return static_cast<std::size_t>(v);
  return 212992;
}

}  // namespace

GlooBackend::GlooBackend(const GlooOptions& options, gloo::rendezvous::Store& store,
                         const std::string& store_name)
    : options_(options) {
  // Gloo writes with writev(), which raises SIGPIPE on a connection its peer closed (a rank that
  // died: its FIN not yet read when the next write goes out). A C++ program keeps SIGPIPE's
  // default action, so the survivor would die of it instead of failing with PEER_LOST. Blocked
  // here, the threads Gloo starts (its TCP event loop) inherit the block for good; guarded()
  // blocks it around every call (free on libhvd's engine thread, which blocks it for good).
  const ScopedSigpipeBlock no_sigpipe;
  gloo::transport::tcp::attr attr;
  attr.hostname = options.bind_address;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    // The device starts Gloo's event-loop thread, which takes the policy of the thread that
    // creates it (HOROVOD_GLOO_LOOP_POLICY; common/thread_policy.h says why).
    const int refused = run_with_thread_policy(
        options.loop_policy, [&] { device = gloo::transport::tcp::CreateDevice(attr); });
    if (refused != 0) {
      logger().warn(
          "HOROVOD_GLOO_LOOP_POLICY={}: the kernel refused the policy ({}); Gloo's "
          "event loop runs under the normal one",
          thread_policy_name(options.loop_policy), std::strerror(refused));
    }
  } catch (const std::exception& e) {
    throw StatusError(HVD_ERR_BACKEND,
                      fmt::format("Gloo cannot bind its TCP device to {} (HVD_ADVERTISE_ADDR): {}",
                                  options.bind_address, e.what()),
                      "the address must belong to this host; hvdrun sets it to the address the "
                      "host was reached at");
  }
  context_ = connect(store, store_name, device);
  if (options.size > 1 && options.sync_bytes > 0) {
    // The second context's keys in the same store, under "sync/".
    gloo::rendezvous::PrefixStore sync_store("sync", store);
    sync_context_ = connect(sync_store, store_name, device);
    for (int r = 0; r < options.size; ++r) {
      // Waits for the pair to be connected, takes it off the event loop, makes it blocking.
      if (r != options.rank) sync_context_->getPair(r)->setSync(true, /*busyPoll=*/false);
    }
    sync_piece_bytes_ = options.sync_piece_bytes > 0
                            ? static_cast<std::size_t>(options.sync_piece_bytes)
                            : wmem_max();
  }
  // connectFullMesh returns when this rank's own pairs are connected, while a peer may still be
  // connecting its side: a rank that left at once (a short program) would cut that peer off.
  // One barrier makes init() return only when every rank is connected (and every rank's
  // synchronous pairs are off the event loop before anything is sent on them).
  barrier();
}

std::shared_ptr<gloo::Context> GlooBackend::connect(
    gloo::rendezvous::Store& store, const std::string& store_name,
    std::shared_ptr<gloo::transport::Device>& device) {
  const GlooOptions& options = options_;
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(options.timeout);  // before connecting: it bounds the connect too
  try {
    context->connectFullMesh(store, device);
  } catch (const StatusError&) {
    throw;  // the store's own error (timeout naming the missing rank, bad token) says it best
  } catch (const std::exception& e) {
    const bool timeout = is_timeout(e.what());
    throw StatusError(
        timeout ? HVD_ERR_TIMEOUT : HVD_ERR_BACKEND,
        fmt::format("Gloo could not connect rank {} of {} to its peers through {}: {}",
                    options.rank, options.size, store_name, e.what()),
        timeout ? "a peer probably failed to start, or a firewall drops TCP between the hosts on "
                  "Gloo's ephemeral ports (docs/network.md, \"Firewalls: what must be open\"; "
                  "hvdrun's network "
                  "check probes only hvdrun's own ports); see the other ranks' output"
                : "a peer probably failed to start or cannot be reached; see the other ranks' "
                  "output. If every rank started, something else may have connected to a Gloo "
                  "port while the ranks connected (Gloo's pairs take any connection as the "
                  "peer: docs/security.md); --max-restarts restarts such a job");
  }
  return context;
}

GlooBackend::~GlooBackend() = default;

template <class Body>
void GlooBackend::guarded(const char* op, Body&& body) {
  if (dead_) {
    throw StatusError(
        dead_status_,
        fmt::format("{} on the Gloo backend: the Gloo context failed earlier ({})", op, *dead_),
        "a failed Gloo context cannot be reused: restart the job");
  }
  // See the constructor. Alone, Gloo writes to no socket, and the block's four system calls
  // would be most of a small op's time on the thread that waits for it (local_cycle_transport.h).
  std::optional<ScopedSigpipeBlock> no_sigpipe;
  if (options_.size > 1) no_sigpipe.emplace();
  try {
    body();
  } catch (const gloo::IoException& e) {
    // Gloo's network errors: a peer's connection closed or reset (it died or was killed), or
    // a read or write timed out (it stopped calling collectives, or froze).
    fail_context(op, e.what(), is_timeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_PEER_LOST);
  } catch (const std::exception& e) {
    fail_context(op, e.what(), is_timeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_BACKEND);
  }
}

void GlooBackend::fail_context(const char* op, const std::string& what, hvd_status status) {
  dead_ = what;
  dead_status_ = status;
  // A peer blocked in a synchronous read from this rank would wait for it until
  // HOROVOD_GLOO_TIMEOUT_SECONDS: halving-doubling's partners are not a ring's, so a rank may never
  // talk to the one that died, and this rank's sockets stay open until its backend goes, which an
  // elastic reset does only after its engine said goodbye to ranks that are still reading. Reset
  // them now: every peer then fails at once, as this rank did.
  if (sync_context_) {
    for (int r = 0; r < options_.size; ++r) {
      if (r != options_.rank) sync_context_->getPair(r)->close();
    }
  }
  throw StatusError(status,
                    fmt::format("{} failed on the Gloo backend at rank {} of {}: {}", op,
                                options_.rank, options_.size, what),
                    status == HVD_ERR_PEER_LOST
                        ? "a peer died or was killed; see the other ranks' output"
                        : "a peer probably died or stopped calling collectives; see the other "
                          "ranks' output (HOROVOD_GLOO_TIMEOUT_SECONDS bounds the wait)");
}

void GlooBackend::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) {
  allreduce_into(nullptr, data, count, dtype, op);
}

void GlooBackend::allreduce_into(const void* in, void* out, std::size_t count, DataType dtype,
                                 ReduceOp op) {
  const ReduceFn fn = reduce_fn(dtype, op);
  if (sync_context_ && count > 0 && count * element_size(dtype) <= options_.sync_bytes) {
    if (in != nullptr && in != out) std::memcpy(out, in, count * element_size(dtype));
    guarded("allreduce", [&] { sync_allreduce(out, count, dtype, op); });
    return;
  }
  guarded("allreduce", [&] {
    gloo::AllreduceOptions opts(context_);
    with_element_type(dtype, [&](auto t) {
      using T = decltype(t);
      // Gloo reads the input (when there is one) and writes the output: no copy of ours.
      if (in != nullptr) opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
      opts.setOutput(static_cast<T*>(out), count);
    });
    opts.setReduceFunction(fn);
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  });
}

void GlooBackend::sync_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) {
  t_sync_reduce = reduce_fn(dtype, op);
  with_element_type(dtype, [&](auto t) {
    using T = decltype(t);
    // Halving-doubling calls only the function; the type is for Gloo's built-in reductions.
    const gloo::ReductionFunction<T> reduce(gloo::CUSTOM, &sync_reduce<T>);
    const std::size_t piece = std::max<std::size_t>(1, sync_piece_bytes_ / sizeof(T));
    T* at = static_cast<T*>(data);
    for (std::size_t done = 0; done < count; done += piece) {
      // A new algorithm per piece: its slots come from the context's counter, the same on every
      // rank because every rank runs the same allreduces in the same order (the engine's).
      const std::size_t n = std::min(piece, count - done);
      gloo::AllreduceHalvingDoubling<T> algorithm(sync_context_, {at + done}, static_cast<int>(n),
                                                  &reduce);
      algorithm.run();
    }
  });
}

void GlooBackend::broadcast(void* data, std::size_t bytes, int root) {
  guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag_++);
    gloo::broadcast(opts);
  });
}

void GlooBackend::allgatherv(const void* in, void* out,
                             const std::vector<std::size_t>& bytes_per_rank) {
  guarded("allgather", [&] {
    gloo::AllgathervOptions opts(context_);
    opts.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(in)),
                  bytes_per_rank[static_cast<std::size_t>(options_.rank)]);
    opts.setOutput(static_cast<std::uint8_t*>(out), bytes_per_rank);
    opts.setTag(next_tag_++);
    gloo::allgatherv(opts);
  });
}

void GlooBackend::alltoallv(const void* in, const std::vector<std::size_t>& send_bytes, void* out,
                            const std::vector<std::size_t>& recv_bytes) {
  guarded("alltoall", [&] {
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(in)),
                  std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
    opts.setOutput(static_cast<std::uint8_t*>(out),
                   std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
    opts.setTag(next_tag_++);
    gloo::alltoallv(opts);
  });
}

void GlooBackend::reducescatter(const void* in, void* out, const std::vector<std::size_t>& counts,
                                DataType dtype, ReduceOp op) {
  std::size_t total = 0, offset = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) == options_.rank) offset = total;
    total += counts[r];
  }
  const std::size_t esize = element_size(dtype);
  std::vector<std::byte> whole(total * esize);
  // memcpy with a null pointer is undefined even for 0 bytes (UBSan: a rank whose share is empty
  // may pass out == nullptr), hence the checks.
  if (!whole.empty()) std::memcpy(whole.data(), in, whole.size());
  allreduce(whole.data(), total, dtype, op);
  const std::size_t mine = counts[static_cast<std::size_t>(options_.rank)] * esize;
  if (mine > 0) std::memcpy(out, whole.data() + offset * esize, mine);
}

void GlooBackend::barrier() {
  guarded("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag_++);
    gloo::barrier(opts);
  });
}

}  // namespace hvd::runtime
