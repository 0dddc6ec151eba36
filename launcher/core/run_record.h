// The run record (--record FILE, docs/why.md "The run record"): what happened in one hvdrun
// launch, as JSON lines a script (or `hvdrun report`, later) reads after the fact. One event
// per line, in the order hvdrun learnt them:
//
//   {"t":0.000,"event":"launch","job_id":"...","np":4,"hosts":[{"host":"a","slots":2},...],
//    "command":["python","train.py"]}
//   {"t":0.412,"event":"rank_started","attempt":1,"rank":0,"host":"a","pid":4242}
//   {"t":61.9,"event":"stall","attempt":1, ...the --json "stalls" entry...}
//   {"t":70.2,"event":"straggler","attempt":1,"rank":3,"host":"b","others_waited_s":9.2,...}
//   {"t":80.0,"event":"rank_exited","attempt":1,"rank":0,"host":"a","exit_code":0,
//    "signal":null,"stopped_by_hvdrun":false}
//   {"t":80.1,"event":"failure","attempt":1,"kind":"stalled","message":"..."}
//   {"t":80.3,"event":"end","exit_code":0,"result":{...the --json result document...}}
//
// `t` is seconds since the record was opened. The file is the user's alone (created 0600, a
// symbolic link at its path refused, an existing file truncated). It is bounded: past
// kMaxRecordBytes one "truncated" event says how many were left out, and only the "end" event
// follows. A write that fails is said once and recording stops; the job never fails for it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

namespace hvd::launcher {

inline constexpr std::size_t kMaxRecordBytes = 8u << 20;

class RunRecord {
 public:
  // Creates (or truncates) `path`. Throws UsageError naming the path and the reason when it
  // cannot (a missing folder, no permission, a symbolic link there).
  static std::shared_ptr<RunRecord> open(const std::string& path,
                                         std::size_t max_bytes = kMaxRecordBytes);

  // Appends one event: {"t":...,"event":kind, ...fields}. `fields` must be an object (or null).
  void event(std::string_view kind, const nlohmann::ordered_json& fields = nullptr);
  // Appends the last event; it is written even past the bound.
  void end(const nlohmann::ordered_json& fields);

  // The attempt the events of the supervisor and the jobs belong to (restarts: 1, 2, ...).
  int attempt() const { return attempt_; }
  void set_attempt(int attempt) { attempt_ = attempt; }

  std::size_t bytes() const { return written_; }  // written so far

 private:
  RunRecord(std::string path, UniqueFd fd, std::size_t max_bytes);
  std::string line(std::string_view kind, const nlohmann::ordered_json& fields) const;
  void write(const std::string& line);

  std::string path_;
  UniqueFd fd_;
  std::size_t max_bytes_;
  std::size_t written_ = 0;
  std::size_t left_out_ = 0;
  bool truncated_ = false;
  bool failed_ = false;
  int attempt_ = 1;
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
};

}  // namespace hvd::launcher
