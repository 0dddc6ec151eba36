// The Runtime's start and stop: the backend's connect (MPI, or Gloo through hvdrun's rendezvous),
// the engine's control planes, the engine the configuration chooses (negotiation cycles on MPI
// collectives or over TCP, cycles of one rank, or the TCP engine), and the stop, engine first.
// The collectives themselves are in runtime.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/backends/nccl_ops.h"
#include "allreduce/engine/control_plane.h"
#include "allreduce/engine/cycle_engine.h"
#include "allreduce/engine/local_cycle_transport.h"
#include "allreduce/engine/tcp_cycle_transport.h"
#include "allreduce/runtime/init_watchdog.h"
#include "allreduce/runtime/report_channel.h"
#include "allreduce/runtime/runtime.h"
#include "contract/env_table.h"
#include "hvd/build_config.h"

extern char** environ;

#if HVD_BUILD_HAS_GLOO
#include <gloo/rendezvous/hash_store.h>

#include "allreduce/backends/gloo_backend.h"
#include "allreduce/backends/http_store.h"
#endif
#if HVD_BUILD_HAS_MPI
#include "allreduce/backends/mpi_backend.h"
#endif

namespace hvd::runtime {
namespace {

#if HVD_BUILD_HAS_GLOO
// Gloo's settings from the runtime's configuration, for a world of `topology`'s rank and size.
GlooOptions gloo_options(const RuntimeConfig& config, const contract::RankTopology& topology) {
  return {topology.rank,
          topology.size,
          config.advertise_addr,
          std::chrono::duration_cast<std::chrono::milliseconds>(config.gloo_timeout),
          config.gloo_loop_policy,
          config.gloo_sync_bytes,
          config.gloo_sync_piece_bytes};
}
#endif

std::unique_ptr<Backend> connect(const RuntimeConfig& config, contract::RankTopology& topology) {
  if (config.backend == BackendKind::kMpi) {
#if HVD_BUILD_HAS_MPI
    auto backend = std::make_unique<MpiBackend>();
    topology = backend->topology();
    return backend;
#endif
  } else {
#if HVD_BUILD_HAS_GLOO
    topology = config.topology;
    const GlooOptions options = gloo_options(config, topology);
    if (config.started_by == StartedBy::kHvdrunNative) {
      HttpStore store({.address = config.rendezvous_addr,
                       .token = config.rendezvous_token,
                       .scope = config.gloo_scope,
                       .rank = topology.rank,
                       .timeout = options.timeout,
                       .interrupted = config.superseded});
      return std::make_unique<GlooBackend>(options, store, store.where());
    }
    gloo::rendezvous::HashStore store;  // alone: size 1, nothing to meet
    return std::make_unique<GlooBackend>(options, store, "an in-process store");
#endif
  }
  throw StatusError(HVD_ERR_INTERNAL, "the configured backend is not built in");
}

// A process set's backend (SetSpec): an MPI communicator of its ranks, or a Gloo context of
// their own, met under a scope of its own in hvdrun's rendezvous.
std::unique_ptr<Backend> connect_set(const RuntimeConfig& config, const SetSpec& set,
                                     contract::RankTopology& topology) {
  topology = set.parent;
  const auto at = std::find(set.ranks.begin(), set.ranks.end(), set.parent.rank);
  if (at == set.ranks.end()) {
    throw StatusError(HVD_ERR_INTERNAL, fmt::format("rank {} is not in {}: it cannot join it",
                                                    set.parent.rank, set.label()));
  }
  topology.rank = static_cast<int>(at - set.ranks.begin());
  topology.size = static_cast<int>(set.ranks.size());
  if (config.backend == BackendKind::kMpi) {
#if HVD_BUILD_HAS_MPI
    // MPI tags are at least 0..32767; a set's serial picks one of the upper half.
    return std::make_unique<MpiBackend>(set.ranks, 16384 + set.serial % 16384);
#endif
  } else {
#if HVD_BUILD_HAS_GLOO
    const GlooOptions options = gloo_options(config, topology);
    if (config.started_by == StartedBy::kHvdrunNative && topology.size > 1) {
      HttpStore store({.address = config.rendezvous_addr,
                       .token = config.rendezvous_token,
                       .scope = fmt::format("{}.ps{}", config.gloo_scope, set.serial),
                       .rank = set.parent.rank,
                       .timeout = options.timeout,
                       .interrupted = config.superseded});
      return std::make_unique<GlooBackend>(options, store, store.where());
    }
    gloo::rendezvous::HashStore store;  // a set of one: nothing to meet
    return std::make_unique<GlooBackend>(options, store, "an in-process store");
#endif
  }
  throw StatusError(HVD_ERR_INTERNAL, "the configured backend is not built in");
}

// Rank 0, at the process's first init (not again at an elastic reset): the HOROVOD_* variables
// that do nothing here, a typo or a knob libhvd lacks (contract::horovod_variable_warnings).
// hvdrun forwards the same HOROVOD_* variables to every rank, so one rank says it for all.
void warn_about_horovod_variables(int rank) {
  static std::atomic<bool> said{false};
  if (rank != 0 || said.exchange(true)) return;
  std::vector<std::string> names;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    names.emplace_back(entry.substr(0, entry.find('=')));
  }
  for (const std::string& line : contract::horovod_variable_warnings(names)) {
    logger().warn("{}", line);
  }
}

// What goes wrong in init() after the backend connected is said here, before the unwinding tears
// the backend down: the other ranks then fail with a reset (or "rank 0 is gone"), and the
// launcher may stop this rank before the program could print the cause.
template <typename Step>
auto said_if_it_throws(Step&& step) {
  try {
    return step();
  } catch (const StatusError& e) {
    logger().error("{}", e.what());
    throw;
  }
}

// The negotiation cycles' transport, or null for the TCP engine. Under MPI the cycles run on MPI
// collectives (cycle_engine.h), unless HOROVOD_MPI_CYCLES=0. Under Gloo, whose small collectives
// are slower than the control plane's messages, they run over TCP connections of their own
// (tcp_cycle_transport.h, the second plane), unless HOROVOD_GLOO_CYCLES=0: then the TCP engine
// negotiates through rank 0's engine thread. Alone (a program run on its own, or a job of one
// rank) a rank runs cycles of one on the waiting thread (local_cycle_transport.h) rather than two
// thread hand-offs per op.
std::unique_ptr<CycleTransport> cycle_transport(const RuntimeConfig& config, int size,
                                                bool tcp_cycles, std::chrono::milliseconds timeout,
                                                Backend& backend,
                                                std::vector<ControlPlane>& planes) {
  if (config.backend == BackendKind::kMpi) {
    return config.mpi_cycles ? backend.cycle_transport() : nullptr;
  }
  if (tcp_cycles) {
    return std::make_unique<TcpCycleTransport>(std::move(planes[1]), timeout);
  }
  if (size == 1) return std::make_unique<LocalCycleTransport>();
  return nullptr;
}

// Eager allreduces (HOROVOD_EAGER_BYTES, else libhvd's choice): worth it where the round they ride
// on costs less than a collective of their own. Over shared memory the slot must stay under Open
// MPI's 4 KiB eager limit, over TCP (2 ranks) up to 32 KiB wins (bench/README.md, "Eager
// allreduce"); every rank receives (size - 1) such inputs.
std::size_t eager_bytes(const RuntimeConfig& config, int size, const Backend& backend) {
  if (config.eager_bytes >= 0) return static_cast<std::size_t>(config.eager_bytes);
  if (size == 1) return 0;
  return backend.shared_memory()
             ? 2048
             : std::min<std::size_t>(32768, 65536 / static_cast<std::size_t>(size - 1));
}

// Rank 0's stall reports to the agent (allreduce/runtime/report_channel.h); none without one.
std::function<void(const StallReport&)> stall_sink(int report_fd) {
  if (report_fd < 0) return {};
  keep_report_fds_private(report_fd);
  return [report_fd](const StallReport& report) {
    if (!send_report_line(report_fd, encode_stall_report(report))) {
      logger().debug("the stall report did not reach this host's agent (its pipe is full)");
    }
  };
}

// Rank 0's hold figures for the launcher's stragglers (the global set's only); none without
// an agent.
std::function<void(const HoldReport&)> holds_sink(int report_fd, const SetSpec& set) {
  if (report_fd < 0 || set.id != 0) return {};
  return [report_fd](const HoldReport& report) {
    if (!send_report_line(report_fd, encode_hold_report(report))) {
      logger().debug("the hold figures did not reach this host's agent (its pipe is full)");
    }
  };
}

EngineOptions engine_options(const RuntimeConfig& config, const contract::RankTopology& topology,
                             const SetSpec& set, std::chrono::milliseconds timeout,
                             Timeline* timeline) {
  return EngineOptions{.rank = topology.rank,
                       .size = topology.size,
                       .controller = {.size = topology.size,
                                      .fusion_threshold = config.fusion_threshold,
                                      .stall_warning = config.stall_warning,
                                      .stall_shutdown = config.stall_shutdown,
                                      .set_label = set.id == 0 ? std::string() : set.label(),
                                      .global_ranks = set.ranks,
                                      .set_id = set.id,
                                      .on_stall = stall_sink(config.report_fd),
                                      .on_holds = holds_sink(config.report_fd, set)},
                       .cycle_time = config.cycle_time,
                       .timeline = timeline,
                       .coordinator_timeout = timeout};
}

}  // namespace

std::string SetSpec::label() const {
  return fmt::format("process set {} (ranks {})", id, fmt::join(ranks, ", "));
}

Runtime::Runtime(const RuntimeConfig& config, SetSpec set)
    : config_(config), set_(std::move(set)), topology_(config.topology) {
  const bool global = set_.id == 0;
  if (global) configure_logger(topology_.rank, config.log_level);
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config_.gloo_timeout);
  // Nothing else bounds the whole of init()'s waits on the other ranks (init_watchdog.h).
  std::optional<InitWatchdog> watchdog;
  const bool alone = global ? topology_.size == 1 : set_.ranks.size() == 1;
  // The watchdog keeps the pointer: the text lives as long as it does.
  const std::string first_stage =
      (config_.backend == BackendKind::kMpi
           ? std::string(global ? "MPI_Init_thread or MPI_Comm_dup" : "MPI_Comm_create_group")
           : std::string("Gloo's rendezvous and connection of the ranks (one TCP connection per "
                         "pair of ranks, each with the timeout on its own)")) +
      (global ? std::string() : " for " + set_.label());
  if (!alone || config_.backend == BackendKind::kMpi) {
    watchdog.emplace(timeout);
    watchdog->stage(first_stage.c_str());
  }
  backend_ = global ? connect(config_, topology_) : connect_set(config_, set_, topology_);
  if (watchdog) watchdog->stage("the engine's control-plane connect");
  if (global) {
    configure_logger(topology_.rank, config.log_level);
    warn_about_horovod_variables(topology_.rank);
    set_.parent = topology_;
  }
  // hvdrun's advertised address, else (under mpirun) one in the networks Open MPI uses; never
  // every interface when either is known.
  const std::string bind = config_.advertise_addr.empty()
                               ? address_in_networks(config_.mpi_tcp_include)
                               : config_.advertise_addr;
  // The TCP cycles (HOROVOD_GLOO_CYCLES=1 under Gloo) negotiate on a second plane, through the
  // same listener. Alone, a rank runs its cycles locally either way.
  const bool tcp_cycles =
      config_.backend == BackendKind::kGloo && config_.gloo_cycles && topology_.size > 1;
  auto planes = said_if_it_throws([&] {
    return ControlPlane::connect_planes(tcp_cycles ? 2 : 1, *backend_, topology_.rank,
                                        topology_.size, bind, timeout, config_.port_range,
                                        config_.master_port);
  });
  if (!global && set_.timeline) {
    timeline_ = std::make_shared<Timeline>(set_.timeline, set_.id, set_.ranks);
  } else if (topology_.rank == 0 && global) {
    timeline_ = std::make_shared<Timeline>();
    if (!config_.timeline.empty()) {
      said_if_it_throws([&] {
        timeline_->start(config_.timeline, config_.timeline_mark_cycles, HVD_ERR_CONFIG,
                         fmt::format("HOROVOD_TIMELINE={:?}", config_.timeline));
        return true;
      });
    }
  }
  if (watchdog) watchdog->stage("the engine's start");
  auto transport = cycle_transport(config_, topology_.size, tcp_cycles, timeout, *backend_, planes);
  eager_bytes_ = eager_bytes(config_, topology_.size, *backend_);
  const EngineOptions engine = engine_options(config_, topology_, set_, timeout, timeline_.get());
  if (transport) {
    engine_ = std::make_unique<CycleEngine>(*this, std::move(planes[0]), std::move(transport),
                                            engine, config_.cache_capacity);
  } else {
    engine_ = std::make_unique<Engine>(*this, std::move(planes[0]), engine);
  }
  logger().debug(
      "initialised: rank {} of {} (local {} of {}, cross {} of {}), backend {}, launcher {}",
      topology_.rank, topology_.size, topology_.local_rank, topology_.local_size,
      topology_.cross_rank, topology_.cross_size, backend_->name(),
      started_by_name(config_.started_by));
}

Runtime::~Runtime() {
  // A job that broke under this rank (a lost peer, a stall shutdown) may leave a collective
  // pending that the others never join: MPI_Finalize would wait for them forever. The backend
  // then leaves MPI as it is, and mpirun ends the job when this rank exits.
  engine_->shutdown();  // joins the background thread before the backend goes
  // What the engine did, for HOROVOD_LOG_LEVEL=debug: how a training run's steps were agreed.
  const EngineStats s = engine_->stats();
  logger().debug(
      "engine: {} cycles, {} decided by bits, {} cache hits, {} negotiated in full, {} "
      "doorbells, {} eager",
      s.cycles, s.decided_by_bits, s.cache_hits, s.negotiated, s.doorbells, s.eager);
  const bool broken = engine_->broken();
  engine_.reset();
  if (broken) backend_->abandon();
  if (nccl_ && abandoned_) nccl_->abort();
}

}  // namespace hvd::runtime
