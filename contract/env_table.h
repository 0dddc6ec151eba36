// The one table of every environment variable that passes between hvdrun and a rank.
//
// The launcher writes these (launcher/plan/plan.cpp, launcher/native/job_specs.cpp), the runtime
// reads them (contract/topology.cpp, allreduce/runtime/config.cpp), and docs/environment.md
// documents them; a unit test checks that the table and the docs list the same names, defaults and
// meanings. Add a variable here first, then write and read it.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::contract {

enum class EnvKind {
  kPerRank,   // set by hvdrun for each rank; always wins over an inherited value
  kInternal,  // HVD_*: launcher->runtime internals; set by hvdrun, never forwarded from the user
  kKnob,      // HOROVOD_* settings the user (or an hvdrun flag) sets and libhvd reads
  kLibrary,   // another library's variable that hvdrun sets when a flag asks (NCCL, CUDA)
};

enum class EnvType { kInt, kString, kAddress, kPort, kSecret };

// A knob's value when unset, typed: libhvd starts from it (allreduce/runtime/config.h) and the docs
// show it (default_text), so each default is written once.
struct KnobDefault {
  enum class Type { kNone, kInteger, kMilliseconds, kText };
  Type type = Type::kNone;
  long long integer = 0;       // kInteger
  double milliseconds = 0;     // kMilliseconds (fractional, Horovod's unit)
  std::string_view text = {};  // kText: a value ("warning") or what unset means ("automatic")

  constexpr std::chrono::microseconds as_microseconds() const {
    return std::chrono::microseconds(static_cast<long long>(milliseconds * 1000 + 0.5));
  }
};
constexpr KnobDefault integer_default(long long v) {
  return {KnobDefault::Type::kInteger, v, 0, {}};
}
constexpr KnobDefault milliseconds_default(double ms) {
  return {KnobDefault::Type::kMilliseconds, 0, ms, {}};
}
constexpr KnobDefault text_default(std::string_view text) {
  return {KnobDefault::Type::kText, 0, 0, text};
}

struct EnvVar {
  std::string_view name;
  EnvKind kind;
  EnvType type;
  std::string_view meaning;
  KnobDefault default_value = {};  // knobs: the value when unset
};

// A knob's default as the docs write it: "67108864", "0.2", "warning".
std::string default_text(const EnvVar& var);

// Horovod's names (https://horovod.readthedocs.io: hvd.rank() etc.).
inline constexpr EnvVar kHorovodRank{"HOROVOD_RANK", EnvKind::kPerRank, EnvType::kInt,
                                     "global rank, 0..size-1"};
inline constexpr EnvVar kHorovodSize{"HOROVOD_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                     "number of ranks in the job"};
inline constexpr EnvVar kHorovodLocalRank{"HOROVOD_LOCAL_RANK", EnvKind::kPerRank, EnvType::kInt,
                                          "rank among the ranks on this host"};
inline constexpr EnvVar kHorovodLocalSize{"HOROVOD_LOCAL_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                          "number of ranks on this host"};
inline constexpr EnvVar kHorovodCrossRank{
    "HOROVOD_CROSS_RANK", EnvKind::kPerRank, EnvType::kInt,
    "index of this host among the hosts that have a rank with this local rank"};
inline constexpr EnvVar kHorovodCrossSize{"HOROVOD_CROSS_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                          "number of hosts that have a rank with this local rank"};
inline constexpr EnvVar kHorovodHostname{"HOROVOD_HOSTNAME", EnvKind::kPerRank, EnvType::kString,
                                         "this rank's host as written in -H or the hostfile"};
// torchrun's names (https://pytorch.org/docs/stable/elastic/run.html).
inline constexpr EnvVar kRank{"RANK", EnvKind::kPerRank, EnvType::kInt, "same as HOROVOD_RANK"};
inline constexpr EnvVar kWorldSize{"WORLD_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                   "same as HOROVOD_SIZE"};
inline constexpr EnvVar kLocalRank{"LOCAL_RANK", EnvKind::kPerRank, EnvType::kInt,
                                   "same as HOROVOD_LOCAL_RANK"};
inline constexpr EnvVar kLocalWorldSize{"LOCAL_WORLD_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                        "same as HOROVOD_LOCAL_SIZE"};
inline constexpr EnvVar kGroupRank{"GROUP_RANK", EnvKind::kPerRank, EnvType::kInt,
                                   "index of this rank's host among the job's hosts"};
inline constexpr EnvVar kGroupWorldSize{"GROUP_WORLD_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                        "number of hosts with a rank"};
// torchrun's roles: hvdrun's ranks all have one, "default" (torchrun's default --role).
inline constexpr EnvVar kRoleRank{"ROLE_RANK", EnvKind::kPerRank, EnvType::kInt,
                                  "same as RANK (one role)"};
inline constexpr EnvVar kRoleWorldSize{"ROLE_WORLD_SIZE", EnvKind::kPerRank, EnvType::kInt,
                                       "same as WORLD_SIZE (one role)"};
inline constexpr EnvVar kRoleName{"ROLE_NAME", EnvKind::kPerRank, EnvType::kString,
                                  "default (torchrun's role name when none is given)"};
inline constexpr EnvVar kMasterAddr{"MASTER_ADDR", EnvKind::kPerRank, EnvType::kAddress,
                                    "rank 0's host, reachable from every host"};
inline constexpr EnvVar kMasterPort{"MASTER_PORT", EnvKind::kPerRank, EnvType::kPort,
                                    "a free port on rank 0's host, chosen at launch"};
// torchrun's restart variables (hvdrun --max-restarts): the same on every rank of an attempt.
inline constexpr EnvVar kRestartCount{"TORCHELASTIC_RESTART_COUNT", EnvKind::kPerRank,
                                      EnvType::kInt,
                                      "restarts before this attempt: 0 on the first"};
inline constexpr EnvVar kMaxRestarts{"TORCHELASTIC_MAX_RESTARTS", EnvKind::kPerRank, EnvType::kInt,
                                     "--max-restarts"};
inline constexpr EnvVar kRunId{"TORCHELASTIC_RUN_ID", EnvKind::kPerRank, EnvType::kString,
                               "the job's id, the same in every attempt"};
// hvdrun internals.
inline constexpr EnvVar kRendezvousAddr{"HVD_RENDEZVOUS_ADDR", EnvKind::kInternal,
                                        EnvType::kAddress,
                                        "host:port of the launcher's rendezvous server"};
inline constexpr EnvVar kRendezvousToken{"HVD_RENDEZVOUS_TOKEN", EnvKind::kInternal,
                                         EnvType::kSecret,
                                         "per-job bearer token for the rendezvous server"};
inline constexpr EnvVar kJobId{"HVD_JOB_ID", EnvKind::kInternal, EnvType::kString,
                               "random id of this launch, the same on every rank"};
inline constexpr EnvVar kAdvertiseAddr{
    "HVD_ADVERTISE_ADDR", EnvKind::kInternal, EnvType::kAddress,
    "address this rank's TCP transport binds to: the one its host was reached at"};
inline constexpr EnvVar kPortRange{
    "HVD_PORT_RANGE", EnvKind::kInternal, EnvType::kString,
    "LOW-HIGH from `hvdrun --port-range`: libhvd's control plane listens inside it (unset: any "
    "free port)"};
// --mpi: what hvdrun --rank-shim needs to give each rank the contract
// (launcher/mpirun/rank_shim.h).
inline constexpr EnvVar kRankLayout{
    "HVD_RANK_LAYOUT", EnvKind::kInternal, EnvType::kString,
    "--mpi: ranks per host in host order (2,2), for hvdrun --rank-shim; unset before the command"};
inline constexpr EnvVar kRankHosts{
    "HVD_RANK_HOSTS", EnvKind::kInternal, EnvType::kString,
    "--mpi: the hosts as written, in the same order, for hvdrun --rank-shim; unset before the "
    "command"};
// Elastic training (docs/design/elastic.md): set only for ranks of an elastic job.
inline constexpr EnvVar kHorovodElastic{
    "HOROVOD_ELASTIC", EnvKind::kPerRank, EnvType::kInt,
    "elastic jobs (--min-np): 1, as Horovod sets it for every elastic rank; unset otherwise"};
inline constexpr EnvVar kElasticFd{
    "HVD_ELASTIC_FD", EnvKind::kInternal, EnvType::kInt,
    "elastic jobs: the descriptor of the rank's channel to its agent, where new generations are "
    "announced ('gen G' lines)"};
inline constexpr EnvVar kElasticWorker{
    "HVD_ELASTIC_WORKER", EnvKind::kInternal, EnvType::kInt,
    "elastic jobs: this process's worker id, which never changes (its rank may, per generation)"};
inline constexpr EnvVar kElasticGeneration{
    "HVD_ELASTIC_GENERATION", EnvKind::kInternal, EnvType::kInt,
    "elastic jobs: the generation this process was started in"};

// A rank's report channel to its agent (contract/report.h): set by the agent of a native launch.
inline constexpr EnvVar kReportFd{
    "HVD_REPORT_FD", EnvKind::kInternal, EnvType::kInt,
    "native launches: the descriptor of the rank's report pipe to its agent (stall reports, the "
    "stack handler's signal), set by the agent"};
inline constexpr EnvVar kStackFd{
    "HVD_STACK_FD", EnvKind::kInternal, EnvType::kInt,
    "native launches: the descriptor where a Python rank's faulthandler writes its threads' "
    "stacks when its agent asks, set by the agent"};

// Other libraries' variables hvdrun sets for a rank when a flag asks for it (kLibrary).
inline constexpr EnvVar kNcclSocketIfname{
    "NCCL_SOCKET_IFNAME", EnvKind::kLibrary, EnvType::kString,
    "NCCL's interface: the one of this host's chosen address (--network-cidr/-interface)"};
inline constexpr EnvVar kGlooIface{
    "HOROVOD_GLOO_IFACE", EnvKind::kLibrary, EnvType::kString,
    "Horovod's Gloo interface: the one of this host's chosen address (--network-cidr/-interface)"};
inline constexpr EnvVar kGlooSocketIfname{
    "GLOO_SOCKET_IFNAME", EnvKind::kLibrary, EnvType::kString,
    "PyTorch's Gloo interface: the one of this host's chosen address (--network-cidr/-interface)"};
inline constexpr EnvVar kNcclIbDisable{
    "NCCL_IB_DISABLE", EnvKind::kLibrary, EnvType::kString,
    "1: NCCL uses TCP sockets, not InfiniBand (--tcp, as in horovodrun)"};
// Defaults for what ranks commonly run (torchrun's and Python's), each only when the user did not
// set it (in hvdrun's environment, which forwards OMP_* and PYTHONUNBUFFERED, or with -x).
inline constexpr EnvVar kOmpNumThreads{
    "OMP_NUM_THREADS", EnvKind::kLibrary, EnvType::kInt,
    "1 when more than one rank shares a host (torchrun's rule: N ranks of N threads each would "
    "overload its cores), with a notice"};
inline constexpr EnvVar kPythonUnbuffered{
    "PYTHONUNBUFFERED", EnvKind::kLibrary, EnvType::kString,
    "1: a Python rank's output reaches hvdrun line by line, not when a buffer fills or the "
    "process ends (and none is lost when it is killed)"};
inline constexpr EnvVar kCudaVisibleDevices{
    "CUDA_VISIBLE_DEVICES", EnvKind::kLibrary, EnvType::kString,
    "the GPUs a rank sees: local_rank*N .. local_rank*N+N-1 (--gpus-per-rank N)"};

// libhvd's knobs (Horovod's names). Forwarded by the HOROVOD_* allow-list, never per rank.
inline constexpr EnvVar kCpuOperations{"HOROVOD_CPU_OPERATIONS", EnvKind::kKnob, EnvType::kString,
                                       "engine for host tensors: mpi or gloo",
                                       text_default("automatic")};
inline constexpr EnvVar kGlooTimeout{
    "HOROVOD_GLOO_TIMEOUT_SECONDS", EnvKind::kKnob, EnvType::kInt,
    "seconds a Gloo rendezvous or collective may wait for a peer, a rank with ops pending for a "
    "word from rank 0, and the whole of hvd::init() for the other ranks (and a margin), before "
    "failing",
    integer_default(30)};
inline constexpr EnvVar kGlooLoopPolicy{
    "HOROVOD_GLOO_LOOP_POLICY", EnvKind::kKnob, EnvType::kString,
    "libhvd's own (not Horovod's): the Linux scheduling policy of Gloo's TCP event-loop thread: "
    "normal, batch (faster when the ranks have their cores to themselves, slower when other work "
    "keeps every core busy) or idle (only for measurements: starved by any busy thread)",
    text_default("normal")};
inline constexpr EnvVar kLogLevel{"HOROVOD_LOG_LEVEL", EnvKind::kKnob, EnvType::kString,
                                  "libhvd's log level: trace, debug, info, warning, error",
                                  text_default("warning")};

inline constexpr EnvVar kFusionThreshold{
    "HOROVOD_FUSION_THRESHOLD", EnvKind::kKnob, EnvType::kInt,
    "bytes: ready allreduces and broadcasts are fused into one collective up to this size; 0 "
    "disables fusion",
    integer_default(64ll << 20)};
inline constexpr EnvVar kCycleTime{
    "HOROVOD_CYCLE_TIME", EnvKind::kKnob, EnvType::kString,
    "milliseconds (fractional): how long a rank batches submissions before negotiating them",
    milliseconds_default(0.2)};
inline constexpr EnvVar kCacheCapacity{
    "HOROVOD_CACHE_CAPACITY", EnvKind::kKnob, EnvType::kInt,
    "tensors: in cycles (HOROVOD_MPI_CYCLES, HOROVOD_GLOO_CYCLES), a tensor negotiated before "
    "with the same name, dtype, shape and op is "
    "agreed by its response-cache slot (the least recently used go); 0 turns the cache off",
    integer_default(1024)};
inline constexpr EnvVar kMpiCycles{
    "HOROVOD_MPI_CYCLES", EnvKind::kKnob, EnvType::kInt,
    "libhvd's own (not Horovod's): under MPI, 1 negotiates in cycles on MPI collectives from the "
    "waiting thread; 0 over the "
    "TCP control plane through rank 0's engine thread",
    integer_default(1)};
inline constexpr EnvVar kGlooCycles{
    "HOROVOD_GLOO_CYCLES", EnvKind::kKnob, EnvType::kInt,
    "libhvd's own (not Horovod's): under Gloo, 1 negotiates in cycles from the waiting thread, "
    "each a message to rank 0 and back on connections of their own, with the response cache; 0 "
    "through rank 0's engine thread (the TCP engine)",
    integer_default(1)};
inline constexpr EnvVar kGlooSyncBytes{
    "HOROVOD_GLOO_SYNC_BYTES", EnvKind::kKnob, EnvType::kInt,
    "libhvd's own (not Horovod's): under Gloo, a host-memory allreduce of at most this many bytes "
    "runs Gloo's halving-doubling algorithm on connections of its own that the calling thread "
    "reads itself (Gloo's synchronous mode), not through Gloo's event-loop thread; larger ones "
    "run gloo::allreduce; 0 turns it off",
    integer_default(4ll << 20)};
inline constexpr EnvVar kGlooSyncPieceBytes{
    "HOROVOD_GLOO_SYNC_PIECE_BYTES", EnvKind::kKnob, EnvType::kInt,
    "libhvd's own (not Horovod's): such an allreduce runs in pieces of at most this many bytes, "
    "so that every message fits the socket's send buffer while both ranks of a pair write at "
    "once; -1 picks net.core.wmem_max (the largest send buffer a socket may ask for)",
    integer_default(-1)};
inline constexpr EnvVar kEagerBytes{
    "HOROVOD_EAGER_BYTES", EnvKind::kKnob, EnvType::kInt,
    "libhvd's own (not Horovod's): a host-memory allreduce of at most this many bytes submitted "
    "alone travels with its negotiation, and every rank (in cycles) or rank 0 (the TCP engine, "
    "which sends the result back) reduces the inputs, with no collective of its own; -1 picks it: "
    "2048 when every rank shares one host's memory under MPI, else 65536 / (size - 1), at most "
    "32768; 0 turns it off",
    integer_default(-1)};
inline constexpr EnvVar kDynamicProcessSets{
    "HOROVOD_DYNAMIC_PROCESS_SETS", EnvKind::kKnob, EnvType::kInt,
    "1 lets the program add and remove process sets after init (hvd::add_process_set); as "
    "hvd::init with dynamic process sets",
    integer_default(0)};
inline constexpr EnvVar kStallCheckDisable{"HOROVOD_STALL_CHECK_DISABLE", EnvKind::kKnob,
                                           EnvType::kInt, "1 turns the stall inspector off",
                                           integer_default(0)};
inline constexpr EnvVar kStallCheckTime{
    "HOROVOD_STALL_CHECK_TIME_SECONDS", EnvKind::kKnob, EnvType::kInt,
    "seconds a tensor may wait for missing ranks before rank 0 warns, naming them",
    integer_default(60)};
inline constexpr EnvVar kStallShutdownTime{
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", EnvKind::kKnob, EnvType::kInt,
    "seconds after which a stall fails every pending op on every rank; 0: never",
    integer_default(0)};
inline constexpr EnvVar kTimeline{"HOROVOD_TIMELINE", EnvKind::kKnob, EnvType::kString,
                                  "file rank 0 writes a Chrome trace of every tensor to",
                                  text_default("unset")};
inline constexpr EnvVar kTimelineMarkCycles{
    "HOROVOD_TIMELINE_MARK_CYCLES", EnvKind::kKnob, EnvType::kInt,
    "1 marks each negotiation cycle (a CYCLE_START instant) in HOROVOD_TIMELINE's file",
    integer_default(0)};

// Horovod knobs libhvd knows by name but does not implement. horovodrun's flags for them set
// them all the same (a Horovod build, or the program itself, may read them), with a warning
// saying what libhvd does instead; docs/environment.md lists them.
struct UnimplementedKnob {
  std::string_view name;
  std::string_view instead;  // what libhvd does instead, as a warning says it
};
std::span<const UnimplementedKnob> unimplemented_knobs();
const UnimplementedKnob* find_unimplemented_knob(std::string_view name);

// What libhvd says at init about the HOROVOD_* variables among `names` (a process's environment
// names; others are ignored), one line each, in the order given:
// - a Horovod knob libhvd does not implement: that it has no effect, and what libhvd does;
// - a name neither libhvd nor Horovod knows (a typo: HOROVOD_FUSION_TRESHOLD): that it has no
//   effect, with the nearest known name;
// nothing for the names libhvd reads and for Horovod's own build and launcher variables
// (HOROVOD_WITH_PYTORCH, HOROVOD_GPU_OPERATIONS, HOROVOD_GLOO_RENDEZVOUS_ADDR, ...), which a
// user's environment may hold and the HOROVOD_* allow-list forwards.
std::vector<std::string> horovod_variable_warnings(std::span<const std::string> names);

// Every contract variable above (per rank and internal), in documentation order.
std::span<const EnvVar* const> env_table();

// Every knob, in documentation order.
std::span<const EnvVar* const> knob_table();

// Every kLibrary variable.
std::span<const EnvVar* const> library_table();

// The variable named `name`, or nullptr.
const EnvVar* find_env_var(std::string_view name);

// Letters, digits and '_', not starting with a digit: what a rank's environment may name.
bool is_valid_env_name(std::string_view name);

// The prefix reserved for kInternal variables.
inline constexpr std::string_view kInternalPrefix = "HVD_";

}  // namespace hvd::contract
