// Stragglers (docs/why.md): the ranks that repeatedly made the others wait, from rank 0's hold
// figures (allreduce/engine/controller.h's HoldReport, a "holds" line on its report channel).
// Pure: the native job (native_job_why.cpp) feeds it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::launcher {

struct HoldFigures {
  int process_set = 0;
  double elapsed_s = 0;  // since the first op was first submitted
  std::uint64_t ops = 0;
  bool final = false;
  struct Rank {
    int rank = 0;
    double held_s = 0;       // wall time the others waited for this rank alone
    std::uint64_t last = 0;  // ops it was the last to submit
  };
  std::vector<Rank> ranks;
};

// A "holds" line. Throws hvd::Error naming what is wrong in a malformed one.
HoldFigures parse_hold_report(std::string_view line);

struct Straggler {
  int rank = 0;
  double others_waited_s = 0;
  double share = 0;       // of the run's time since its first op
  double last_share = 0;  // of the ops, those it was the last to submit
};

// What makes a rank a straggler: it held the others for at least kMinShare of the run, for
// most of all the time any rank held them (kMinDominance: in a balanced job the waits are
// spread over the ranks), and was the last to submit most of the ops (kMinLastShare); and the
// run had kMinOps ops over kMinElapsed seconds to say so.
inline constexpr double kMinShare = 0.10;
inline constexpr double kMinDominance = 0.5;
// Most ops, not half: two ranks that share cores take turns being last (a 2-rank job measured
// 56% for one of them, 17% of the run held), while a rank 30% slower is last in nearly all.
inline constexpr double kMinLastShare = 0.75;
inline constexpr std::uint64_t kMinOps = 20;
inline constexpr double kMinElapsed = 2.0;

// The stragglers the figures show, slowest first (none in a balanced job).
std::vector<Straggler> find_stragglers(const HoldFigures& figures);

// "straggler: rank 3 on b made the others wait 12.5 s of 40.2 s (31%): it was the last to
// submit 96% of 1200 ops" (without "hvdrun: warning: ").
std::string straggler_line(const Straggler& s, const std::string& host, const HoldFigures& f);

}  // namespace hvd::launcher
