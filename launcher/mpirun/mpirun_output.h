// mpirun's output read back (`hvdrun --mpi`): its --tag-output lines split into ranks and
// streams, and what its own messages say about a failed rank.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace hvd::launcher {

// How mpirun's --tag-output ends a tag: Open MPI 4 writes "[1,3]<stderr>:text", Open MPI 5
// (PRRTE) "[1,3]<stderr>: text". The space is the tag's, not the rank's text.
enum class TagEnd { kColon, kColonSpace };

// "[1,3]<stderr>:text" -> rank 3, stderr, "text"; nullopt for mpirun's own lines and for a tag
// that names no rank of the job (`ranks`: -np): a rank above it, or more digits than an int
// holds, is text a rank printed, never parsed as a number.
struct TaggedLine {
  int rank = 0;
  bool is_stderr = false;
  std::string text;
};
std::optional<TaggedLine> parse_tagged_line(std::string_view line,
                                            int ranks = std::numeric_limits<int>::max(),
                                            TagEnd end = TagEnd::kColon);

// mpirun's --tag-output stream (its stdout or its stderr), split with bounded memory: the bytes of
// a tagged line go to `on_rank_bytes(rank, is_stderr, bytes)` as they arrive (a line of any length
// passes through in pieces; the output router reassembles and caps it), mpirun's own lines go to
// `on_own_line(line, true)`, cut at kMaxOwnLine. What it holds between calls is at most one line
// start (up to the tag) or one own line.
//
// Only mpirun's own lines may steer hvdrun, and rank text can look like anything: a tag that
// names no rank of the job (`ranks`: -np) is text, inside a line (a piece of the current rank's)
// and at a line's start alike; such a line is handed over as `on_own_line(line, false)`: to be
// shown, never read as mpirun's.
class TagSplitter {
 public:
  static constexpr size_t kMaxTag = 64;            // "[1,4294967295]<stderr>:" and then some
  static constexpr size_t kMaxOwnLine = 64 << 10;  // mpirun's own messages are short
  using RankBytes = std::function<void(int rank, bool is_stderr, std::string_view bytes)>;
  using OwnLine = std::function<void(std::string_view line, bool from_mpirun)>;

  TagSplitter(RankBytes on_rank_bytes, OwnLine on_own_line,
              int ranks = std::numeric_limits<int>::max(), TagEnd end = TagEnd::kColon)
      : on_rank_bytes_(std::move(on_rank_bytes)),
        on_own_line_(std::move(on_own_line)),
        ranks_(ranks),
        end_(end) {}
  void feed(std::string_view bytes);
  void finish();  // the stream ended: a last partial own line is delivered
  size_t buffered() const { return head_.size() + held_.size(); }

 private:
  void consume(std::string_view segment, bool ended);
  void pass_through(std::string_view segment, bool ended);

  RankBytes on_rank_bytes_;
  OwnLine on_own_line_;
  int ranks_;
  TagEnd end_;
  std::string head_;                   // a line's start, before its tag is known; or an own line
  std::optional<TaggedLine> current_;  // the line being passed through (text unused)
  std::string held_;                   // in a tagged line: what may be the start of a next tag
  bool own_line_ = false;              // head_ is one of mpirun's own lines
  bool forged_ = false;                // ... or a line that starts with a tag of no rank
  bool own_truncated_ = false;
};

// The rank mpirun names in "Process name: [[12345,1],2]" (Open MPI 4) or "Process name:
// [prterun-host-4242@1,2]" (Open MPI 5), if any.
std::optional<int> failed_rank_from_mpirun(std::string_view text);
// Whether mpirun says a rank of the job failed (Open MPI 4: "Primary job terminated normally, but
// 1 process returned a non-zero exit code"; 5: "prterun detected that one or more processes
// exited with non-zero status"), also when it does not name the rank (under load it sometimes
// ends before printing "Process name: ...").
bool mpirun_reports_rank_failure(std::string_view text);
// Whether this line of mpirun's own says it is aborting the job after a rank failed ("Per
// user-direction, the job has been aborted.", "mpirun noticed that process rank 1 ...", Open
// MPI 5's "prterun noticed that process rank 1 ...").
bool mpirun_aborts_job(std::string_view line);

}  // namespace hvd::launcher
