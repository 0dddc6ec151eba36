// The hang verdict (docs/why.md): what hvdrun says when rank 0's engine reports a stall, put
// together from the report (contract/report.h: the tensors, who waits on each, who has not
// submitted it and what it submitted instead) and the missing ranks' agents' inspections (state,
// CPU, the engine thread, the Python stack). Pure: the native job (native_job_why.cpp) feeds it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::launcher {

struct StalledOp {
  // "allreduce", ...; "negotiation": a cycle the missing ranks' engines never answered; "init":
  // ranks that never called hvd.init() (the start-up watch: `tensor` is "")
  std::string op;
  std::string tensor;  // its name
  int process_set = 0;
  std::string set_label;  // "" for the global set
  double seconds = 0;     // how long the first rank to submit it has waited
  std::vector<int> waiting;
  struct Missing {
    int rank = 0;
    std::vector<std::string> submitted;  // what it submitted instead (the same table's names)
  };
  std::vector<Missing> missing;
};

// Rank 0's stall line (its "kind" is "stall"): the stalled ops, in its order. Throws hvd::Error
// naming what is wrong in a malformed one (a rank's bytes: never trusted).
std::vector<StalledOp> parse_stall_report(std::string_view line);

// What a missing rank's agent found (agent/agent_why.cpp's kInspection entry), or only its host
// when no answer came.
struct RankInspection {
  int rank = 0;
  std::string host;
  nlohmann::json found;  // the agent's object for this rank; null when none came
};

// An agent's kInspection entry with only the fields the verdict reads, each of its type (a field
// missing or of another type is left out; `stack` keeps its strings, at most 1000): what comes
// over the wire never reaches render_verdict() unchecked.
nlohmann::json clean_inspection(const nlohmann::json& raw);

// The verdict as lines for stderr (without "hvdrun: "): one block per set of missing ranks,
// naming the ops they have not submitted, who waits, and each missing rank's process.
std::vector<std::string> render_verdict(const std::vector<StalledOp>& ops,
                                        const std::vector<RankInspection>& inspections);

// The verdict in one line, for the job's root cause when a stall ends it: the first block's
// head line (without "stall: ") and, for each of its missing ranks, its host, its process and
// the innermost frame of the first thread of its stack.
std::string verdict_summary(const std::vector<StalledOp>& ops,
                            const std::vector<RankInspection>& inspections);

// What stays the same while a stall goes on unchanged (the ops, who is missing, what each
// missing rank submitted, its state and stack; not the seconds or the CPU figures): a verdict
// repeated every warning period is shown whole only when this changes.
std::string verdict_key(const std::vector<StalledOp>& ops,
                        const std::vector<RankInspection>& inspections);

// The --json result's "stalls" entries (docs/cli.md), one per stalled op.
nlohmann::ordered_json stalls_json(const std::vector<StalledOp>& ops,
                                   const std::vector<RankInspection>& inspections);

// The missing ranks of `ops`, sorted, each once.
std::vector<int> missing_ranks(const std::vector<StalledOp>& ops);

}  // namespace hvd::launcher
