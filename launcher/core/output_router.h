// Rank output as users see it: every line tagged `[1,RANK]<stdout>:line` (Open MPI's
// --tag-output format), written whole so ranks interleave only at line boundaries; '\r' ends a
// line too; a last partial line is flushed at the end. Lines are split on bytes, so UTF-8 split
// across chunks and binary data pass through intact. Optionally also DIR/rank.N/{stdout,stderr},
// untagged.
//
// Console output is queued, never written blocking: the launcher's event loop drains the queues
// when poll() says the console takes more, and stops reading from agents while the queue is over
// kMaxQueuedBytes. So a slow reader of hvdrun's stdout slows the ranks down (back-pressure)
// without growing memory, and signals are still handled while nobody reads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/protocol.h"
#include "common/unique_fd.h"

namespace hvd::launcher {

inline constexpr size_t kKeptStderrLines = 20;
// The stderr tails (for the failure report) hold at most this much of each line and, all ranks
// together, at most kKeptStderrBytes: a job's oldest kept lines go first. Outside the console
// queue's cap, so bounded on their own (2 ranks x 25 lines of 1 MiB held 49 MB).
inline constexpr size_t kKeptStderrLineBytes = 4096;
inline constexpr size_t kKeptStderrBytes = 1 << 20;
inline constexpr size_t kMaxLineBytes = 1 << 20;    // a longer "line" is cut into pieces
inline constexpr size_t kMaxQueuedBytes = 8 << 20;  // above this, stop reading from agents

// How console lines look: tagged (the default; --no-tag-output drops the tag) and, with
// --timestamp-output, the wall-clock time in front, in the format horovodrun and Open MPI use
// ("Wed Dec 02 20:40:00 2026[1,0]<stdout>:..."). Files under --output-filename stay untagged.
// --output-ranks: only these ranks' lines reach the console (sorted; unset: every rank). The
// others still go to the --output-filename files and keep their stderr tails for the failure
// report, so a hidden rank's root cause is still shown.
struct LineFormat {
  bool tag = true;
  bool timestamp = false;
  std::optional<std::vector<int>> ranks;
};

// "0", "0,3-5": the ranks of --output-ranks, sorted, each once. Throws UsageError naming the
// item that is not a rank or a LOW-HIGH range of ranks (0 to 1048575, LOW <= HIGH).
std::vector<int> parse_rank_list(std::string_view text);

class OutputRouter {
 public:
  // `out_fd`/`err_fd`: where tagged lines go. `dir`: also keep per-rank files there (in its
  // folder `subdir`, when given: `--max-restarts`' attempt.K).
  // The newest router is the live one (before_own_console_line), until it is destroyed.
  OutputRouter(int out_fd, int err_fd, std::optional<std::string> dir, LineFormat format = {},
               std::optional<std::string> subdir = std::nullopt);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  // The rank started: with a folder, both its files exist from now on, also if it never writes
  // (DIR/rank.N/stdout and stderr, empty). Writes open them too.
  void open_files(int rank);
  void write(int rank, agent::Stream stream, std::string_view bytes);
  // Emits any partial last line of the rank (call when it exited).
  void flush(int rank);
  // The rank's last kKeptStderrLines stderr lines, untagged.
  const std::deque<std::string>& last_stderr(int rank);
  // The rank's last line on either stream, untagged ("" before any).
  std::string last_line(int rank) const;

  // Console queues: fds with bytes waiting, how many bytes in all.
  bool pending(int fd) const;
  size_t queued_bytes() const;
  // Writes what `fd` takes now: at most one pipe buffer's worth, and only when a poll() of its
  // own says the console takes it (a caller's poll() may be stale), so it never blocks. Call when
  // poll() reported POLLOUT. False: nothing written (nothing queued, or the console is full).
  bool drain(int fd);
  // Writes what the console takes now, as many times as poll() says it takes more without
  // waiting: never blocks.
  void drain_ready();
  // Drops everything queued and all console output from now on (the job is being interrupted
  // and nobody reads); stderr tails and files are kept.
  void abandon_console();
  // Elastic jobs on a terminal: draws the status line (status_line.h) when no console output
  // waits. Called once per turn of the supervisor's loop.
  void refresh_status();

 private:
  struct Queue {
    std::string bytes;
    size_t offset = 0;
  };
  struct StreamState {
    std::string partial;
    bool after_cr = false;  // a '\n' right after '\r' does not end another line
    UniqueFd file;
    bool file_opened = false;
  };
  StreamState& state(int rank, agent::Stream stream);
  void emit_line(int rank, agent::Stream stream, std::string_view line, std::string& batch);
  void open_file(int rank, agent::Stream stream, StreamState& s);
  void write_file(int rank, agent::Stream stream, StreamState& s, std::string_view bytes);
  UniqueFd open_rank_file(int rank, agent::Stream stream);

  void enqueue(int fd, std::string_view bytes);
  bool is_terminal(int fd);
  std::map<int, bool> terminal_;  // isatty, by fd

  int out_fd_;  // borrowed: the console (or --json's stderr) the router writes to
  int err_fd_;
  std::map<int, Queue> queues_;
  bool abandoned_ = false;
  std::optional<std::string> dir_;
  std::optional<std::string> subdir_;
  UniqueFd dir_fd_;  // dir_, opened once
  LineFormat format_;
  std::map<int, std::string> last_line_;  // --timeout's report: each rank's last line, cut
  std::map<std::pair<int, int>, StreamState> streams_;
  std::map<int, std::deque<std::string>> stderr_tail_;
  // Every kept tail line by the order it came in (its rank), and their bytes: what goes first
  // when the job's tails are over kKeptStderrBytes.
  std::map<uint64_t, int> tail_order_;
  std::map<int, std::deque<uint64_t>> tail_seq_;  // per rank, beside stderr_tail_
  uint64_t tail_next_ = 0;
  size_t tail_bytes_ = 0;
  void keep_stderr_line(int rank, std::string_view line);
  void drop_oldest_stderr_line(int rank);
};

// hvdrun's log sink calls this before each line of its own: the live router, on the thread that
// created it, first writes the rank output it already holds as far as the console takes it now
// (drain_ready), so a rank's last words, received before its exit, come before hvdrun's words
// about that exit. Nothing on another thread, or without a router.
void before_own_console_line();

}  // namespace hvd::launcher
