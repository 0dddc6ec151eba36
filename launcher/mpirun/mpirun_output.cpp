#include "launcher/mpirun/mpirun_output.h"

#include <charconv>
#include <regex>

namespace hvd::launcher {

namespace {

// The number in `digits` if it is below `limit` (an int, so never out of range).
std::optional<int> small_number(std::string_view digits, int limit) {
  int value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value >= limit) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::optional<TaggedLine> parse_tagged_line(std::string_view line, int ranks, TagEnd end) {
  static const std::regex kTag(R"(^\[[0-9]+,([0-9]+)\]<(stdout|stderr)>:)");
  static const std::regex kTagSpace(R"(^\[[0-9]+,([0-9]+)\]<(stdout|stderr)>: )");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, end == TagEnd::kColon ? kTag : kTagSpace)) {
    return std::nullopt;
  }
  const auto rank =
      small_number(std::string_view(&*m[1].first, static_cast<size_t>(m.length(1))), ranks);
  if (!rank) return std::nullopt;
  return TaggedLine{*rank, m[2].str() == "stderr",
                    std::string(line.substr(static_cast<size_t>(m.length(0))))};
}

namespace {

// Whether `line` starts with what reads as a tag, whatever its numbers (a rank's text).
bool looks_like_tag(std::string_view line) {
  static const std::regex kTag(R"(^\[[0-9]+,[0-9]+\]<(stdout|stderr)>:)");
  return std::regex_search(line.begin(), line.end(), kTag);
}

// How much of `s` is one of mpirun's tags, "[J,R]<stdout>:" or "[J,R]<stderr>:", from its start:
// the tag's length when `s` starts with a whole one, -1 when `s` (all of it) may still become one
// as more bytes come, 0 when it cannot.
long tag_at(std::string_view s, int ranks, TagEnd end) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - from < 10) ++i;
    return i > from;
  };
  auto literal = [&](std::string_view word) {  // 1: matched, 0: mismatch, -1: s ended inside
    for (char c : word) {
      if (i == s.size()) return -1;
      if (s[i++] != c) return 0;
    }
    return 1;
  };
  if (s.empty() || s[0] != '[') return 0;
  i = 1;
  if (i == s.size()) return -1;
  if (!digits()) return 0;
  if (i == s.size()) return -1;
  if (int r = literal(","); r != 1) return r;
  if (i == s.size()) return -1;
  const size_t rank_from = i;
  if (!digits()) return 0;
  if (i == s.size()) return -1;
  if (!small_number(s.substr(rank_from, i - rank_from), ranks)) return 0;  // no rank of the job
  if (int r = literal("]<std"); r != 1) return r;
  if (i == s.size()) return -1;
  const char which = s[i];
  if (which != 'o' && which != 'e') return 0;
  if (int r = literal(which == 'o' ? "out>:" : "err>:"); r != 1) return r;
  if (end == TagEnd::kColonSpace) {
    if (int r = literal(" "); r != 1) return r;
  }
  return static_cast<long>(i);
}

}  // namespace

void TagSplitter::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const bool ended = nl != std::string_view::npos;
    const std::string_view segment = bytes.substr(0, ended ? nl : bytes.size());
    bytes.remove_prefix(segment.size() + (ended ? 1 : 0));
    consume(segment, ended);
  }
}

// One piece of a line (`ended`: its newline came right after it).
void TagSplitter::consume(std::string_view segment, bool ended) {
  if (current_) {
    pass_through(segment, ended);
    return;
  }
  if (own_line_) {  // one of mpirun's own lines: kept up to kMaxOwnLine
    const size_t room = kMaxOwnLine - std::min(head_.size(), kMaxOwnLine);
    head_.append(segment.substr(0, room));
    own_truncated_ |= segment.size() > room;
    if (ended) {
      on_own_line_(own_truncated_ ? head_ + " [...]" : head_, !forged_);
      head_.clear();
      own_line_ = false;
      own_truncated_ = false;
      forged_ = false;
    }
    return;
  }
  // Not decided yet: at most kMaxTag + 1 bytes of the line's start are looked at.
  const size_t take = std::min(segment.size(), kMaxTag + 1 - head_.size());
  head_.append(segment.substr(0, take));
  const std::string_view rest = segment.substr(take);
  if (auto tagged = parse_tagged_line(head_, ranks_, end_)) {
    current_ = TaggedLine{tagged->rank, tagged->is_stderr, {}};
    head_.clear();
    consume(tagged->text + std::string(rest), ended);
    return;
  }
  // A tag's end was seen (">:", and the space after it under Open MPI 5) and it did not parse.
  const size_t colon = head_.find(">:");
  const size_t tag_end = colon + 2 + (end_ == TagEnd::kColonSpace ? 1 : 0);
  const bool cannot_be_a_tag = (!head_.empty() && head_.front() != '[') || head_.size() > kMaxTag ||
                               (colon != std::string::npos && head_.size() >= tag_end);
  if (cannot_be_a_tag || ended) {
    forged_ = looks_like_tag(head_);
    own_line_ = true;
    std::string start = std::move(head_);
    head_.clear();
    consume(start + std::string(rest), ended);
  }
}

// A tagged line's bytes pass through as they come. mpirun tags every piece it read from a rank,
// not every line: a rank that writes a line in several write()s (Python with PYTHONUNBUFFERED
// writes a traceback line in pieces) gives "[1,1]<stderr>:    [1,1]<stderr>:raise X\n", and
// another rank's piece may come between: "[1,1]<stderr>:ab[1,0]<stdout>:cd\n". So a tag inside
// a line starts a piece of that tag's rank and stream, and is not text. A possible tag cut by the
// end of a read is held (at most kMaxTag bytes) until the next read says what it is.
void TagSplitter::pass_through(std::string_view segment, bool ended) {
  std::string data = std::move(held_);
  held_.clear();
  data.append(segment);
  std::string_view rest = data;
  for (;;) {
    size_t at = rest.find('[');
    long len = 0;
    while (at != std::string_view::npos) {
      len = tag_at(rest.substr(at), ranks_, end_);
      if (len != 0) break;
      at = rest.find('[', at + 1);
    }
    if (at == std::string_view::npos || (len < 0 && ended)) {  // no tag: all of it is text
      std::string bytes(rest);
      if (ended) bytes += '\n';
      if (!bytes.empty()) on_rank_bytes_(current_->rank, current_->is_stderr, bytes);
      if (ended) current_.reset();
      return;
    }
    if (at > 0) on_rank_bytes_(current_->rank, current_->is_stderr, rest.substr(0, at));
    if (len < 0) {  // the read ended inside what may be a tag
      held_ = std::string(rest.substr(at));
      return;
    }
    const auto tagged = parse_tagged_line(rest.substr(at, static_cast<size_t>(len)), ranks_, end_);
    current_ = TaggedLine{tagged->rank, tagged->is_stderr, {}};
    rest.remove_prefix(at + static_cast<size_t>(len));
  }
}

void TagSplitter::finish() {
  if (current_ && !held_.empty()) on_rank_bytes_(current_->rank, current_->is_stderr, held_);
  held_.clear();
  if (!head_.empty()) {
    on_own_line_(head_, !forged_ && !looks_like_tag(head_));
  }
  head_.clear();
  own_line_ = false;
  forged_ = false;
  current_.reset();
}

std::optional<int> failed_rank_from_mpirun(std::string_view text) {
  // Open MPI 4 names the job "[12345,1]", Open MPI 5 "prterun-HOST-PID@1".
  static const std::regex kProcess(
      R"(Process name:\s*\[(?:\[[0-9]+,[0-9]+\]|[^\]\s@]+@[0-9]+),([0-9]+)\])");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(text.begin(), text.end(), m, kProcess)) return std::nullopt;
  return small_number(std::string_view(&*m[1].first, static_cast<size_t>(m.length(1))),
                      std::numeric_limits<int>::max());
}

bool mpirun_reports_rank_failure(std::string_view text) {
  // mpirun wraps its box's lines where it likes: match the words, whatever the whitespace.
  static const std::regex kFailure(
      R"(returned\s+a\s+non-zero\s+exit\s+code|exited\s+with\s+non-zero\s+status)");
  return std::regex_search(text.begin(), text.end(), kFailure);
}

bool mpirun_aborts_job(std::string_view line) {
  return line.find("the job has been aborted") != std::string_view::npos ||
         line.find("mpirun noticed that process rank") != std::string_view::npos ||
         line.find("prterun noticed that process rank") != std::string_view::npos;
}

}  // namespace hvd::launcher
