// Elastic training's host discovery (`--host-discovery-script PATH`, horovodrun's): a program the
// launcher runs every --discovery-interval seconds, whose standard output lists the hosts the job
// may use now, one per line:
//
//     host            # --slots-per-host slots (default 1)
//     host:4          # 4 slots
//     user@host:2     # as in -H
//     [fe80::1]:2     # IPv6 in brackets
//
// Blank lines and lines starting with '#' are ignored. The parser is pure; DiscoveryRunner runs
// the script without a shell and without blocking the launcher's loop.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/process.h"
#include "launcher/plan/host_spec.h"

namespace hvd::launcher {

inline constexpr std::size_t kMaxDiscoveryHosts = 4096;
inline constexpr std::size_t kMaxDiscoveryLine = 1024;
inline constexpr std::size_t kMaxDiscoveryOutput = 1 << 20;
// How long one run of the script may take before it is killed.
inline constexpr std::chrono::milliseconds kDiscoveryTimeout{10000};

// The hosts in `text`, in output order. Throws Error naming the line and what is wrong: a bad
// entry, a host listed twice, a line over kMaxDiscoveryLine bytes or a NUL byte, more than
// kMaxDiscoveryHosts hosts. Empty output is no hosts (not an error).
std::vector<HostSpec> parse_discovery_output(std::string_view text, int default_slots);

// What one run of the script listed, and the bytes it printed.
struct DiscoveryListing {
  std::vector<HostSpec> hosts;
  std::string output;
};

// One run of the script at a time, polled by the launcher's loop: start() it, add out_fd() to
// poll, call on_readable() when it is readable and finish() once it has exited or its time is up.
class DiscoveryRunner {
 public:
  using Clock = std::chrono::steady_clock;
  struct Outcome {
    std::optional<std::vector<HostSpec>> hosts;  // nullopt: the run failed, or is unchanged
    std::string error;                           // why it failed, with the tail of its stderr
    // The script printed what its last good run printed, byte for byte (`hosts` is nullopt):
    // nothing to do. An unchanged list costs a comparison, not a parse, a copy and a pass over
    // thousands of hosts.
    bool unchanged = false;
  };

  DiscoveryRunner(std::string path, int default_slots, std::chrono::milliseconds timeout)
      : path_(std::move(path)), default_slots_(default_slots), timeout_(timeout) {}

  // The launch's own run (run_once()) printed `output`, which parsed: a run that prints the same
  // is `unchanged`. The job starts from that list; parsing it again would be a second pass over
  // what may be thousands of hosts.
  void assume_output(std::string output) {
    last_good_out_ = std::move(output);
    have_good_out_ = true;
  }

  bool running() const { return process_.has_value(); }
  void start(Clock::time_point now);
  // Descriptors to poll while it runs (-1 for the ones that are closed).
  int out_fd() const;
  int err_fd() const;
  // Reads what is there; true once both pipes are closed.
  bool on_readable();
  // When the run must be over.
  std::optional<Clock::time_point> deadline() const { return deadline_; }
  // Done once the script exited (what it wrote is read then; a background process it left
  // holding its stdout is not waited for), or at the deadline (then it is killed). nullopt
  // while it still runs.
  std::optional<Outcome> finish(Clock::time_point now);

  // Runs the script once, blocking, for the launch's first host list. Throws Error.
  static DiscoveryListing run_once(const std::string& path, int default_slots,
                                   std::chrono::milliseconds timeout);

 private:
  void take_what_is_left();

  std::string path_;
  int default_slots_;
  std::chrono::milliseconds timeout_;
  std::optional<Process> process_;
  std::optional<Clock::time_point> deadline_;
  std::string out_, err_;
  std::string last_good_out_;  // what the last run that parsed printed
  bool have_good_out_ = false;
  bool too_much_ = false;
  bool failed_to_start_ = false;
};

}  // namespace hvd::launcher
