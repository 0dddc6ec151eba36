// hvd::elastic (hvd/elastic.hpp): State, run(), and the reset from one generation of an elastic
// job to the next (docs/design/elastic.md, section 6).
#include "hvd/elastic.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "allreduce/api/boundary.h"
#include "allreduce/api/log.h"
#include "allreduce/api/process_state.h"
#include "allreduce/api/status_error.h"
#include "contract/elastic.h"
#include "hvd/build_config.h"

#if HVD_BUILD_HAS_GLOO
#include "allreduce/backends/http_store.h"
#endif

namespace hvd::elastic {
namespace {

using api_detail::ProcessState;
using Clock = std::chrono::steady_clock;

// How long a rank whose generation failed waits for the next one to be announced: the launcher
// needs to notice the failure (an exit, a lost host: seconds) and publish.
constexpr std::chrono::seconds kNextGenerationWait{60};
constexpr std::size_t kMaxChannelLine = 256;

// Reads what the agent wrote on the channel ("gen G" lines) for up to `timeout` (0: only what is
// there), keeping the newest generation announced. Lines it does not know are ignored (a later
// protocol may add some); p.mutex is not held (the channel has one reader: the elastic thread).
void pump_channel(ProcessState& p, std::chrono::milliseconds timeout) {
  const int fd = p.config->elastic.fd;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      p.channel_closed = true;
      return;
    }
    p.channel_partial.append(buf, static_cast<std::size_t>(n));
    bool got = false;
    for (std::size_t nl; (nl = p.channel_partial.find('\n')) != std::string::npos;) {
      const std::string line = p.channel_partial.substr(0, nl);
      p.channel_partial.erase(0, nl + 1);
      int g = 0;
      if (std::sscanf(line.c_str(), "gen %d", &g) == 1 && g > p.announced) {
        p.announced = g;
        got = true;
      }
    }
    if (p.channel_partial.size() > kMaxChannelLine) p.channel_partial.clear();
    if (got || timeout.count() == 0) return;
  }
}

ProcessState& elastic_process(const char* call) {
  ProcessState& p = api_detail::process_state();
  if (!p.config || p.config->elastic.fd < 0) {
    throw runtime::StatusError(
        HVD_ERR_NOT_INITIALIZED,
        fmt::format("hvd::elastic::{}() needs hvd::init() in a process of an elastic hvdrun job",
                    call),
        "start the job with hvdrun's elastic flags, or call the loop without hvd::elastic");
  }
  return p;
}

// The next generation's world document, from the launcher's rendezvous store.
contract::WorldDoc fetch_world(const runtime::RuntimeConfig& config, int generation) {
#if HVD_BUILD_HAS_GLOO
  runtime::HttpStore store({.address = config.rendezvous_addr,
                            .token = config.rendezvous_token,
                            .scope = contract::elastic_scope(config.job_id),
                            .rank = config.topology.rank,
                            .timeout = config.gloo_timeout,
                            .interrupted = {}});
  const std::vector<char> bytes = store.get(contract::world_key(generation));
  try {
    return contract::decode_world(std::string_view(bytes.data(), bytes.size()));
  } catch (const Error& e) {
    throw runtime::StatusError(HVD_ERR_CONFIG, e.what(), e.hint());
  }
#else
  (void)config;
  (void)generation;
  throw runtime::StatusError(HVD_ERR_UNSUPPORTED, "elastic training needs libhvd built with Gloo");
#endif
}

// Waits until the launcher announced a generation newer than p.generation (the channel's
// "gen G" lines); throws PEER_LOST when the channel closes, TIMEOUT after kNextGenerationWait.
int wait_for_newer(ProcessState& p) {
  const auto deadline = Clock::now() + kNextGenerationWait;
  while (p.announced <= p.generation) {
    if (p.channel_closed) {
      throw runtime::StatusError(HVD_ERR_PEER_LOST,
                                 "the channel to hvdrun's agent closed while this rank waited for "
                                 "the next generation: the launcher or the agent is gone",
                                 "see hvdrun's report");
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw runtime::StatusError(
          HVD_ERR_TIMEOUT,
          fmt::format("generation {} failed and no next generation was announced within {} s",
                      p.generation, kNextGenerationWait.count()),
          "see hvdrun's report");
    }
    pump_channel(p, left);
  }
  return p.announced;
}

// Drops the current runtime, waits for the next generation and builds the runtime for it. A
// generation that cannot be built (a peer died before it connected, or a newer one was
// announced meanwhile: its rendezvous gives up at once) is skipped for the next one, as the
// launcher publishes it (docs/design/elastic.md, 6.4).
void reset_generation() {
  ProcessState& p = elastic_process("run");
  std::shared_ptr<runtime::Runtime> old;
  std::vector<std::shared_ptr<runtime::Runtime>> old_sets;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    old = std::move(p.runtime);
    // Process sets name ranks of the old world: they end with it (docs/libhvd.md).
    for (auto& [id, entry] : p.sets) old_sets.push_back(std::move(entry.runtime));
    p.sets.clear();
  }
  const auto began = Clock::now();
  for (auto& set : old_sets) {
    if (set) set->abandon();
  }
  old_sets.clear();
  if (old) old->abandon();  // NCCL communicators of this world are aborted, not destroyed
  old.reset();              // the engine joins; Gloo's context and the control plane close
  const auto closed = Clock::now();
  for (;;) {
    const int next = wait_for_newer(p);
    const auto announced = Clock::now();
    const contract::WorldDoc doc = fetch_world(*p.config, next);
    const auto fetched = Clock::now();
    const int worker = p.config->elastic.worker;
    const contract::WorldEntry* entry = doc.find_worker(worker);
    if (entry == nullptr) {
      throw runtime::StatusError(
          HVD_ERR_REMOVED,
          fmt::format("worker {} is not in generation {} of the job ({}): it leaves the job",
                      worker, next, doc.reason),
          "hvdrun stops this process and the job goes on without it; nothing to do");
    }
    runtime::RuntimeConfig config = *p.config;
    config.topology = entry->topology;
    config.gloo_scope = contract::generation_scope(config.job_id, next);
    config.master_port = doc.master_port;
    config.elastic.generation = next;
    config.superseded = [&p, next] {
      pump_channel(p, std::chrono::milliseconds(0));
      return p.announced > next;
    };
    runtime::logger().info("elastic: generation {} ({}): rank {} of {}", next, doc.reason,
                           entry->topology.rank, doc.size());
    std::shared_ptr<runtime::Runtime> fresh;
    try {
      fresh = std::make_shared<runtime::Runtime>(config);
    } catch (const runtime::StatusError& e) {
      if (e.status() != HVD_ERR_PEER_LOST && e.status() != HVD_ERR_TIMEOUT) throw;
      runtime::logger().warn("elastic: generation {} could not be formed: {}; waiting for the next",
                             next, e.what());
      std::lock_guard<std::mutex> lock(p.mutex);
      p.generation = next;
      continue;
    }
    const auto built = Clock::now();
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    runtime::logger().debug(
        "elastic: generation {} in {:.0f} ms: old world closed {:.0f}, waited for the "
        "announcement {:.0f}, world document {:.0f}, new world built {:.0f}",
        next, ms(began, built), ms(began, closed), ms(closed, announced), ms(announced, fetched),
        ms(fetched, built));
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      p.runtime = std::move(fresh);
      p.set_calls = 0;  // a new world's process-set calls are named afresh (api.cpp: init)
      p.generation = next;
      p.sync_root = doc.sync_root;
      p.master_addr = doc.master_addr;
      p.master_port = doc.master_port;
      ++p.resets;
    }
    // Best effort: a closed channel shows at the next wait.
    api_detail::elastic_joined(*p.config, next);
    return;
  }
}

}  // namespace
}  // namespace hvd::elastic

namespace hvd::api_detail {

contract::WorldDoc elastic_first_world(const runtime::RuntimeConfig& config, int generation) {
  const contract::WorldDoc doc = elastic::fetch_world(config, generation);
  if (doc.find_worker(config.elastic.worker) == nullptr) {
    throw runtime::StatusError(
        HVD_ERR_CONFIG,
        fmt::format("worker {} was started for generation {} but is not in it",
                    config.elastic.worker, generation),
        "a launcher bug: report it with hvdrun's --json output");
  }
  return doc;
}

void elastic_joined(const runtime::RuntimeConfig& config, int generation) {
  const std::string text = fmt::format("joined {}\n", generation);
  [[maybe_unused]] const ssize_t n = ::write(config.elastic.fd, text.data(), text.size());
}

}  // namespace hvd::api_detail

namespace hvd::elastic {

const char* HostsUpdatedInterrupt::what() const noexcept {
  return "the launcher announced a new generation of the job's world";
}

State::~State() = default;

void State::commit() {
  save();
  check_host_updates();
}

void State::check_host_updates() {
  if (!enabled()) return;  // outside an elastic job the world never changes
  ProcessState* p = &api_detail::process_state();
  pump_channel(*p, std::chrono::milliseconds(0));
  // Every rank must leave together: the newest generation any rank has heard of.
  std::int64_t newest = p->announced;
  allreduce(tensor(&newest, 1), AllreduceOptions{.op = ReduceOp::kMax});
  if (newest > p->generation) {
    p->announced = std::max(p->announced, static_cast<int>(newest));
    throw HostsUpdatedInterrupt();
  }
}

void BufferState::add(const std::string& name, void* data, std::size_t bytes) {
  entries_.push_back({name, data, bytes, {}});
}

void BufferState::save() {
  for (Entry& e : entries_) {
    e.saved.resize(e.bytes);
    std::memcpy(e.saved.data(), e.data, e.bytes);
  }
}

void BufferState::restore() {
  for (Entry& e : entries_) {
    if (e.saved.size() == e.bytes) std::memcpy(e.data, e.saved.data(), e.bytes);
  }
}

void BufferState::sync() {
  const int root = world().sync_root;
  for (Entry& e : entries_) {
    broadcast(Tensor{e.data, DataType::kUInt8, {static_cast<std::int64_t>(e.bytes)}}, root);
  }
  save();
}

bool enabled() {
  ProcessState& p = api_detail::process_state();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.runtime && p.config && p.config->elastic.fd >= 0;
}

WorldInfo world() {
  ProcessState& p = api_detail::process_state();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.config || p.config->elastic.fd < 0) return {};
  return {p.generation, p.config->elastic.worker, p.sync_root, p.resets, p.master_addr,
          p.master_port};
}

void run(State& state, const std::function<void()>& fn) {
  if (!enabled()) {
    fn();
    return;
  }
  for (;;) {
    try {
      state.sync();
      fn();
      return;
    } catch (const RuntimeError& e) {
      if (e.status() != HVD_ERR_PEER_LOST) throw;
      runtime::logger().warn(
          "elastic: a peer was lost (HVD_ERR_PEER_LOST): {}; restoring the "
          "last commit",
          e.what());
      state.restore();
    } catch (const HostsUpdatedInterrupt&) {
      runtime::logger().info("elastic: the hosts changed; moving to the next generation");
    }
    runtime::at_boundary([] { reset_generation(); });
  }
}

}  // namespace hvd::elastic
