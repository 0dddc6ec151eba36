// The launcher <-> host agent protocol: binary, length-prefixed frames over the agent's stdin
// and stdout (a pipe locally, an SSH exec channel remotely). Output is bytes, never re-encoded.
//
// Frame: 4-byte big-endian payload length, 1-byte type, payload. Control messages (hello, spec,
// error) carry JSON; the hot ones (output, started, exited) are packed binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd_io.h"

namespace hvd::agent {

// 2: the network probes (agent/probe.h); 3: keepalive pings; 4: the exited frame's "after a
// stop" flag, the signal frame; 5: elastic jobs (the spec's "elastic", the rank-event and
// generation frames); 6: elastic refills (kStartRanks, kStartFailed; an elastic agent stays up
// when its ranks have ended, until the launcher ends the job)
// 7: pings before the spec, with a limit; 8: every rank's report channel (kRankReport) and
// inspections (kInspect, kInspection: docs/why.md)
inline constexpr int kProtocolVersion = 8;
// The longest line a rank may write on its elastic channel ("joined 3"); longer ones are dropped.
inline constexpr size_t kMaxRankEventLine = 256;
inline constexpr uint32_t kMaxFramePayload = 16u << 20;  // a spec for thousands of ranks fits
inline constexpr size_t kFrameHeader = 5;

enum class FrameType : uint8_t {
  // agent -> launcher
  kHello = 1,         // JSON: protocol, version, hostname, boot_id
  kStarted = 2,       // rank u32, pid u32
  kOutput = 3,        // rank u32, stream u8 (1 stdout, 2 stderr), bytes
  kExited = 4,        // rank u32, flags u8 (1: a signal, else a code; 2: after a stop), value u32
  kError = 5,         // JSON: message, hint, kind; the agent gives up on the whole job
  kDone = 6,          // empty: every rank has exited and nothing of the job is left on the host
  kListening = 7,     // JSON: the port its probe listener got (answers kProbeListen)
  kProbeResult = 8,   // JSON: one outcome per probe target (answers kProbe)
  kProbeClosed = 9,   // empty: the probe listener is closed (answers kProbeClose)
  kPong = 10,         // empty: answers kPing
  kRankEvent = 11,    // worker u32, one line its rank wrote on its elastic channel (no newline)
  kStartFailed = 12,  // JSON: worker, message, hint: a rank of kStartRanks could not start
  kRankReport = 13,   // rank u32, one line its rank wrote on its report channel (no newline):
                      // JSON, e.g. rank 0's stall report (contract/report.h)
  kInspection = 14,   // JSON: what the ranks of a kInspect are doing (agent/inspect.h)
  // launcher -> agent
  kSpec = 16,         // JSON job spec (agent/job_spec.h)
  kTerminate = 17,    // empty: SIGTERM every rank, SIGKILL after the grace period
  kKill = 18,         // empty: SIGKILL every rank now
  kProbeListen = 19,  // JSON: open the probe listener (port range, greeting token)
  kProbe = 20,        // JSON: connect to these targets, report each (before the spec)
  kProbeClose = 21,   // empty: close the probe listener now (rank 0's host: MASTER_PORT)
  kPing = 22,         // u32: the keepalive, from the agent's hello on (answer kPong at once):
                      // the agent gives up on a launcher silent this many ms (0: never)
  kSignal = 23,       // signal u8: send it to every running rank (SIGUSR1 or SIGUSR2 only)
  kGeneration = 24,   // generation u32, count u32, worker u32 x count: write "gen G" to their
                      // elastic channels (the workers of that generation this agent runs)
  kStartRanks = 25,   // JSON job spec (agent/job_spec.h) holding only the ranks to start now:
                      // elastic jobs, after the first spec (a refilled slot, a new rank)
  kInspect = 26,      // JSON {"ranks": [...]}: read these ranks' processes and Python stacks,
                      // answer kInspection (a stalled job: docs/why.md)
};

enum class Stream : uint8_t { kStdout = 1, kStderr = 2 };

struct Frame {
  FrameType type = FrameType::kHello;
  std::string payload;
};

std::string encode_frame(FrameType type, std::string_view payload);

// Incremental decoder: feed bytes as they arrive, take whole frames out.
class FrameReader {
 public:
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // The same, appending in place: a sealed link (agent/sealed_link.h) opens records straight
  // into it, a copy fewer of every byte of rank output. Only appending is allowed.
  std::string& input() { return buffer_; }
  // The next whole frame, or nullopt when more bytes are needed. Throws hvd::Error on a frame
  // longer than kMaxFramePayload or of an unknown type (a peer speaking something else).
  std::optional<Frame> next();
  size_t buffered() const { return buffer_.size() - offset_; }

 private:
  std::string buffer_;
  size_t offset_ = 0;
};

// Packed payloads.
struct OutputChunk {
  uint32_t rank = 0;
  Stream stream = Stream::kStdout;
  std::string bytes;
};
struct RankStarted {
  uint32_t rank = 0;
  uint32_t pid = 0;
};
struct RankExited {
  uint32_t rank = 0;
  bool signaled = false;
  uint32_t value = 0;    // exit code, or signal number
  bool stopped = false;  // the agent had signalled it to stop (a job stop) before it ended
};

std::string encode_output(const OutputChunk& chunk);
std::string encode_started(const RankStarted& started);
std::string encode_exited(const RankExited& exited);
std::string encode_signal(int signal);
std::string encode_ping(uint32_t silence_limit_ms);

// Elastic jobs (docs/design/elastic.md, section 5): a line from a rank's channel, and a new
// generation announced to the workers that are in it.
struct RankEvent {
  uint32_t worker = 0;
  std::string line;
};
struct GenerationNotice {
  uint32_t generation = 0;
  std::vector<uint32_t> workers;
};
std::string encode_rank_event(const RankEvent& event);
// A line of a rank's report channel (contract/report.h): rank u32, then the line.
struct RankReport {
  uint32_t rank = 0;
  std::string line;
};
std::string encode_rank_report(const RankReport& report);
// Throws hvd::Error for a line longer than contract::kMaxReportLine or one holding a newline.
RankReport decode_rank_report(std::string_view payload);
std::string encode_generation(const GenerationNotice& notice);
// Throw hvd::Error on a malformed payload.
OutputChunk decode_output(std::string_view payload);
RankStarted decode_started(std::string_view payload);
RankExited decode_exited(std::string_view payload);
// The signals a launcher forwards to the ranks (SIGUSR1, SIGUSR2); anything else throws.
int decode_signal(std::string_view payload);
// The silence limit a ping carries, in ms (0: none).
uint32_t decode_ping(std::string_view payload);
// Throw hvd::Error for a line longer than kMaxRankEventLine or one holding a newline, and for a
// notice whose count does not match its size.
RankEvent decode_rank_event(std::string_view payload);
GenerationNotice decode_generation(std::string_view payload);

// The fd helpers live in common/fd_io.h; re-exported here for the protocol's users.
using hvd::read_some;
using hvd::write_all;

}  // namespace hvd::agent
