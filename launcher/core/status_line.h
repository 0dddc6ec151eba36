// The one line an elastic job keeps at the bottom of a terminal ("elastic: 6 ranks on 3 hosts,
// generation 4; h2#1 back in 38 s"), redrawn in place. Process-wide, because two writers share
// the terminal: the output router (rank output) and the log (hvdrun's own lines, through
// StatusAwareSink). Whoever writes to the terminal clears the line first (clear_now); the
// supervisor's loop draws it again when nothing else waits for the terminal (draw_now). Both
// write at once, a few bytes to a terminal: the line is on screen exactly when `visible`.
//
// Off unless enable() was called (stderr is a terminal and --json is not given). Three users: an
// elastic job's state, the launch's start-up progress and --check-ssh's progress.
#pragma once

#include <mutex>
#include <string>

namespace hvd::launcher {

// Whether stderr wants a live line: a terminal (not TERM=dumb) and no --json (`json`).
bool stderr_wants_status_line(bool json);

class StatusLine {
 public:
  static StatusLine& get();

  void enable(int fd);  // the terminal's descriptor (stderr)
  bool enabled() const;
  // The text to show; empty: none (the line is cleared).
  void set(std::string text);
  // Clears the line if it is shown (before other bytes go to the terminal).
  void clear_now();
  // Shows the text if it is not shown or changed.
  void draw_now();

 private:
  mutable std::mutex mutex_;
  int fd_ = -1;
  std::string text_;
  bool visible_ = false;
  bool dirty_ = false;
};

}  // namespace hvd::launcher
