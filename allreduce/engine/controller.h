// The coordinator's decisions, as pure logic (rank 0's engine feeds it; unit tests drive it).
//
// It keeps the table of named ops that some ranks have submitted, and decides:
// - readiness: an op is ready once every rank has submitted it; ready ops come out in the order
//   they became ready, which becomes every rank's execution order;
// - validation: when the last rank submits, every rank's request is compared with the first
//   rank's (operation, dtype, CPU/GPU, shape, reduce op, root, scale factors); a mismatch is an
//   error response naming the tensor, the field, both values and both ranks;
// - fusion: ready allreduces with the same dtype, op, scale factors and device (and broadcasts
//   with the same root) are packed into one response up to the fusion threshold;
// - stalls: ops some ranks submitted and others did not, for longer than the warning time, are
//   reported by missing rank; past the shutdown time (if set) the job is failed;
// - departures: a rank that shut down or left fails what still needs it;
// - join (hvd::join, OpKind::kJoin): a rank that joined counts as having submitted every
//   allreduce (it runs them with zeros: joined_request()); any other op fails while a rank is
//   joined; once every rank joined, the join ops run and say who joined last (join_result()).
// - groups (Request::group: hvd::grouped_allreduce_async and the other grouped calls): a member
//   that is ready waits until every member of its group is ready, then the whole group comes out
//   at once and forms one response of its own, whatever the fusion threshold (a group is the
//   caller's unit: it is never split and never shares a response with other tensors). A member
//   that fails (a mismatch, including one rank submitting it in another group or alone, a
//   departed rank, a join) fails the whole group, and every other group that shares a tensor with
//   it, with one error response naming every member, on every rank. Groups are known by their
//   name (Request::group): ranks that pass different tensors to one grouped call (another count,
//   other names) fail it at once; a rank that submits the group after that gets the same error.
// Not thread-safe: the engine's background thread owns it.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "allreduce/engine/messages.h"
#include "contract/env_table.h"

namespace hvd::runtime {

using Clock = std::chrono::steady_clock;

// A stall, as check_stalls() found it: the tensors due for a warning, who waits on each, who
// has not submitted it and what that rank submitted instead (the names of this table it did
// submit: the classic "ranks called different ops"). Ranks are global ones.
struct StalledTensor {
  struct Missing {
    int rank = 0;
    std::vector<std::string> submitted;  // sorted, at most kMaxSubmittedShown
  };
  std::string name;
  OpKind kind = OpKind::kAllreduce;
  std::chrono::milliseconds waited{0};  // since the first rank submitted it
  std::vector<int> waiting;             // the ranks that submitted it
  std::vector<Missing> missing;
  // Not a tensor's stall but a negotiation cycle some ranks' engines never answered (their
  // process frozen: stopped, in a debugger; the cycle engine's own check): `name` is the first
  // tensor rank 0 brought to it ("" if none), `kind` means nothing.
  bool cycle = false;
};
struct StallReport {
  int process_set = 0;
  std::string set_label;  // "" for the global set
  std::vector<StalledTensor> tensors;
  // The stall shutdown's report (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS): sent once, just before
  // the engine fails every pending op, with the tensor (or cycle) that ended the job.
  bool shutdown = false;
};
inline constexpr std::size_t kMaxSubmittedShown = 8;

// Who held the others up (stragglers: docs/why.md). For each op every rank submitted, the last
// rank to submit it held the others for the time between the second-last submission and its
// own. Per rank those intervals are merged (a step's hundred tensors, all submitted late, count
// once), so `held` is wall time the job spent waiting for that rank alone.
struct HoldReport {
  int process_set = 0;
  std::chrono::milliseconds elapsed{0};  // since the first op's first submission
  std::uint64_t ops = 0;                 // ops every rank submitted, one by one
  struct Rank {
    int rank = 0;  // a global rank
    std::chrono::milliseconds held{0};
    std::uint64_t last = 0;  // ops this rank was the last to submit
  };
  std::vector<Rank> ranks;  // every rank
  bool final = false;       // every rank shut down: the run's totals
};

// Defaults: the contract table's (contract/env_table.h).
struct ControllerOptions {
  int size = 1;
  // bytes; 0 disables fusion
  std::size_t fusion_threshold =
      static_cast<std::size_t>(contract::kFusionThreshold.default_value.integer);
  // 0: no stall check
  std::chrono::milliseconds stall_warning =
      std::chrono::seconds(contract::kStallCheckTime.default_value.integer);
  // 0: stalls only warn
  std::chrono::milliseconds stall_shutdown =
      std::chrono::seconds(contract::kStallShutdownTime.default_value.integer);
  // A process set's engine (the Runtime of a set, not the global one): its name in messages
  // ("process set 1 (ranks 0, 2)") and the global rank of each of its ranks, so that a stall
  // names the ranks the user knows. Empty: the global set, whose ranks are the global ones.
  std::string set_label{};
  std::vector<int> global_ranks{};
  int set_id = 0;  // the process set's id, for stall reports
  // Called by check_stalls() with what it warns about, as data (rank 0's engine sends it to the
  // launcher: allreduce/runtime/report_channel.h), and once more with `shutdown` set when the
  // stall shutdown ends the job. Empty: nobody listens.
  std::function<void(const StallReport&)> on_stall{};
  // Called with the hold figures at most once per `holds_period` while ops complete, and once
  // when every rank has shut down (final). Empty: not measured.
  std::function<void(const HoldReport&)> on_holds{};
  std::chrono::milliseconds holds_period = std::chrono::seconds(5);
};

// One op ready to run, for fusion: its request (the lowest rank's) and its error (nullptr or
// empty: none).
struct ReadyOp {
  const Request* request;
  const std::string* error;
};
// Fusion as the Controller does it: `ready` in readiness order; the responses go to the end of
// `out`. Ready allreduces with the same dtype, op, scale factors and CPU device (broadcasts with
// the same root) share a response up to `threshold` bytes (0: none do). The members of a group
// (Request::group, all of them in `ready`) form one response of their own, in `ready`'s order.
void fuse_responses(const std::vector<ReadyOp>& ready, std::size_t threshold,
                    std::vector<Response>& out);

class Controller {
 public:
  explicit Controller(ControllerOptions options);

  // Requests from `rank`, received at `now` (moved from when the caller passes an rvalue).
  void add(int rank, RequestList list, Clock::time_point now);
  // Every rank brought `list`: the same requests in the same order, no name twice (one rank's
  // ops in flight), as when every rank makes the same synchronous call. With nothing pending and
  // no rank gone, each request is ready at once, in this order, with the same validation and
  // fusion as add() for every rank, without the table; otherwise it is add() for every rank.
  void add_unanimous(RequestList list, Clock::time_point now);
  // `rank`'s connection closed without a shutdown message: the job is broken.
  void rank_left(int rank);

  // Join: the request (the lowest submitting rank's) of an allreduce decided while some ranks had
  // joined, which those ranks run with zeros; the last rank to join, for a join op decided. Each
  // is taken once (nullopt when there is none), in the order the responses run.
  std::optional<Request> take_joined_request(const std::string& name);
  std::optional<int> take_join_result(const std::string& name);

  // Everything decided since the last call (responses in execution order, or a fatal error).
  ResponseList take();

  // Stall warnings to log (one line per missing rank), at most once per warning period.
  std::vector<std::string> check_stalls(Clock::time_point now);
  // When check_stalls() next has something to say; nullopt when nothing is pending.
  std::optional<Clock::time_point> next_stall_check() const;

  // Some tensor waits for ranks that have not submitted it (the coordinator keeps the waiting
  // ranks told that it is alive: Engine's keepalive).
  bool waiting() const { return !table_.empty() && fatal_.empty(); }
  bool idle() const { return table_.empty() && out_.empty() && fatal_.empty() && groups_.empty(); }
  const ControllerOptions& options() const { return options_; }
  // The rank users know for this engine's `rank` (ControllerOptions::global_ranks).
  int global_rank(int rank) const { return shown(rank); }

  const std::set<int>& shut_down() const { return shut_down_; }
  bool everyone_shut_down() const { return static_cast<int>(shut_down_.size()) == options_.size; }
  const std::string& fatal() const { return fatal_; }

 private:
  // One name some ranks have submitted. Per-tensor work stays O(size): a step of a few hundred
  // tensors is negotiated on every step, so this is on the engine's critical path.
  struct Entry {
    std::vector<std::pair<int, Request>> by_rank;  // arrival order; sorted by rank when complete
    std::vector<bool> submitted;                   // indexed by rank
    Clock::time_point first_seen;
    Clock::time_point last_warned;
    Clock::time_point last_arrival;  // the latest submission, and the one before it
    Clock::time_point prev_arrival;
    bool has(int rank) const { return submitted[static_cast<std::size_t>(rank)]; }
  };
  void complete(const std::string& name, Entry& entry);
  std::string validate(const std::string& name, const Entry& entry) const;
  // Rank `rank_b`'s request `b` against the first rank's `a`: the mismatch, or empty.
  static std::string mismatch(const std::string& name, int rank_a, const Request& a, int rank_b,
                              const Request& b);
  std::vector<std::string> sorted_names() const;  // the table's names, for stable messages
  // check_stalls()'s report of the `due` names, for ControllerOptions::on_stall.
  StallReport stall_report(const std::vector<std::string>& due, Clock::time_point now) const;
  void fail_waiting_for(int rank, const std::string& why);
  // The hold figures (controller_stalls.cpp): `rank` held the others from `from` to `to`.
  void note_hold(int rank, Clock::time_point from, Clock::time_point to);
  void report_holds(Clock::time_point now, bool final);
  void fuse_ready();
  // Join: every rank not joined has submitted `entry`.
  bool complete_with_joined(const Entry& entry) const;
  std::string joined_error(const Request& request) const;
  // A rank joined: complete what waited only for it (allreduces), fail what cannot run.
  void rank_joined();
  // The rank users know (ControllerOptions::global_ranks) and "" or "in process set 1 (...): ".
  int shown(int rank) const;
  std::string where() const;

  // Groups (Request::group). A member decided (every rank submitted it, valid): to its group, or
  // to ready_ when it is in none.
  void decided(Request request, std::string error);
  // `name`, submitted as `request` by `rank` (kNoRank: a failure path; kEveryRank: every rank at
  // once), belongs to request.group: noted there, and checked against the group's count. `name`
  // is in the group's names already (kKnown), is not (kNew), or may be (kMaybe: looked for).
  static constexpr int kNoRank = -1;
  static constexpr int kEveryRank = -2;
  enum class NameIs { kKnown, kNew, kMaybe };
  void note_member(const std::string& name, const Request& request, int rank, NameIs known);
  // A request of a group that failed before this rank submitted it, or a member of one that
  // failed by a mismatch before this rank submitted that member: fails at once (true).
  bool failed_before(const Request& request, int rank);
  bool failed_member(const Request& request, int rank);
  // A name failed with `error`: the group of `request` (from `rank`) and of each rank's request
  // in `by_rank` fails with it (false: none is in a group).
  // `mismatch`: the ranks' requests differ (later submissions of the group or its members fail
  // with the same error: failed_groups_, failed_names_).
  bool fail_group(const Request& request, int rank, const std::string& error, bool departed,
                  bool mismatch = false);
  bool fail_groups(const std::vector<std::pair<int, Request>>& by_rank, const std::string& error,
                   bool departed, bool mismatch = false);
  // ... and when none is, `name` alone fails with an error response of its own.
  void fail_name(const std::string& name, const std::vector<std::pair<int, Request>>& by_rank,
                 const Request& request, int rank, const std::string& error, bool departed);
  // The groups touched since the last call: a failed one becomes one error response for every
  // member (taken out of the table), a complete one goes to ready_ whole.
  void settle_groups();

  ControllerOptions options_;
  std::unordered_map<std::string, Entry> table_;
  std::vector<std::pair<Request, std::string>> ready_;  // request of the lowest rank, error
  std::vector<Response> out_;
  std::set<int> shut_down_;
  std::set<int> joined_;  // ranks whose join op waits for the others
  int last_joined_ = -1;
  std::unordered_map<std::string, Request> joined_requests_;
  std::unordered_map<std::string, int> join_results_;
  struct Group {
    OpKind kind = OpKind::kAllreduce;
    std::uint32_t size = 0;
    std::vector<std::string> names;  // every member name some rank submitted under this id
    std::vector<std::pair<Request, std::string>> decided;  // ready members, in readiness order
    std::string error;  // non-empty: the whole group fails with it
    bool departed = false;
    bool disagree = false;    // error: the ranks passed different tensors (note_member)
    bool mismatch = false;    // error: the ranks' requests differ (disagree, or a validation)
    int size_rank = kNoRank;  // the rank whose count `size` is
    std::vector<bool> seen;   // ranks that submitted it, by rank
  };
  std::unordered_map<std::uint64_t, Group> groups_;
  // Groups that failed before every rank submitted them: the error the others get (and which
  // ranks have had it), until each has.
  struct Failed {
    OpKind kind = OpKind::kAllreduce;
    std::string error;
    bool departed = false;
    std::vector<bool> seen;
  };
  std::unordered_map<std::uint64_t, Failed> failed_groups_;
  std::unordered_map<std::string, Failed> failed_names_;  // by member name
  std::vector<std::uint64_t> touched_;                    // groups to settle
  std::string fatal_;
  hvd_status fatal_status_ = HVD_ERR_BACKEND;  // PEER_LOST when a rank left
  bool fatal_sent_ = false;
  // The hold figures (HoldReport), by rank; only while on_holds is set.
  std::vector<Clock::duration> held_;
  std::vector<std::uint64_t> held_last_;
  std::vector<Clock::time_point> held_until_;  // the end of the rank's last interval counted
  std::uint64_t held_ops_ = 0;
  std::optional<Clock::time_point> first_op_;
  Clock::time_point next_holds_{};
  bool holds_final_sent_ = false;
};

}  // namespace hvd::runtime
