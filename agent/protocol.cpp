#include "agent/protocol.h"

#include <fmt/format.h>
#include <signal.h>

#include "common/error.h"
#include "contract/report.h"

namespace hvd::agent {
namespace {

void put_u32(std::string& out, uint32_t v) {
  out += static_cast<char>((v >> 24) & 0xff);
  out += static_cast<char>((v >> 16) & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
  out += static_cast<char>(v & 0xff);
}

uint32_t get_u32(std::string_view in, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(in[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(in[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(in[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(in[at + 3]));
}

// The two contiguous blocks of FrameType: agent -> launcher, launcher -> agent.
bool known_type(uint8_t t) {
  const auto in = [t](FrameType first, FrameType last) {
    return t >= static_cast<uint8_t>(first) && t <= static_cast<uint8_t>(last);
  };
  return in(FrameType::kHello, FrameType::kInspection) || in(FrameType::kSpec, FrameType::kInspect);
}

// The exited frame's flags byte.
constexpr uint8_t kExitedSignaled = 1;
constexpr uint8_t kExitedStopped = 2;

void require_size(std::string_view payload, size_t size, std::string_view what) {
  if (payload.size() < size) {
    throw Error(
        fmt::format("protocol error: a {} frame of {} bytes is too short", what, payload.size()));
  }
}

}  // namespace

std::string encode_frame(FrameType type, std::string_view payload) {
  std::string out;
  out.reserve(kFrameHeader + payload.size());
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out += static_cast<char>(type);
  out.append(payload);
  return out;
}

std::optional<Frame> FrameReader::next() {
  if (buffered() < kFrameHeader) return std::nullopt;
  const uint32_t length = get_u32(buffer_, offset_);
  const auto type = static_cast<uint8_t>(buffer_[offset_ + 4]);
  if (length > kMaxFramePayload || !known_type(type)) {
    // The usual cause: something printed text on the agent's stdout (a login script).
    throw Error(fmt::format("protocol error: unexpected bytes from the peer: \"{}\"",
                            buffer_.substr(offset_, std::min<size_t>(buffered(), 40))),
                "something other than the hvdrun agent wrote to its stdout: a login script "
                "(~/.bashrc, /etc/profile) printing text for non-interactive sessions? Print "
                "only in interactive shells (case $- in *i*) or to stderr; else the versions "
                "differ");
  }
  if (buffered() < kFrameHeader + length) return std::nullopt;
  Frame frame{static_cast<FrameType>(type), buffer_.substr(offset_ + kFrameHeader, length)};
  offset_ += kFrameHeader + length;
  if (offset_ > (1u << 16) && offset_ * 2 > buffer_.size()) {  // compact now and then
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return frame;
}

std::string encode_output(const OutputChunk& chunk) {
  std::string out;
  put_u32(out, chunk.rank);
  out += static_cast<char>(chunk.stream);
  out += chunk.bytes;
  return out;
}

std::string encode_started(const RankStarted& started) {
  std::string out;
  put_u32(out, started.rank);
  put_u32(out, started.pid);
  return out;
}

std::string encode_exited(const RankExited& exited) {
  std::string out;
  put_u32(out, exited.rank);
  out += static_cast<char>((exited.signaled ? kExitedSignaled : 0) |
                           (exited.stopped ? kExitedStopped : 0));
  put_u32(out, exited.value);
  return out;
}

std::string encode_signal(int signal) { return std::string(1, static_cast<char>(signal)); }

std::string encode_ping(uint32_t silence_limit_ms) {
  std::string out;
  put_u32(out, silence_limit_ms);
  return out;
}

uint32_t decode_ping(std::string_view payload) {
  require_size(payload, 4, "ping");
  if (payload.size() != 4) {
    throw Error(fmt::format("protocol error: a ping of {} bytes, not 4", payload.size()));
  }
  return get_u32(payload, 0);
}

OutputChunk decode_output(std::string_view payload) {
  require_size(payload, 5, "output");
  const auto stream = static_cast<uint8_t>(payload[4]);
  if (stream != 1 && stream != 2)
    throw Error("protocol error: output frame for stream " + std::to_string(stream));
  return {get_u32(payload, 0), static_cast<Stream>(stream), std::string(payload.substr(5))};
}

RankStarted decode_started(std::string_view payload) {
  require_size(payload, 8, "started");
  return {get_u32(payload, 0), get_u32(payload, 4)};
}

RankExited decode_exited(std::string_view payload) {
  require_size(payload, 9, "exited");
  const auto flags = static_cast<uint8_t>(payload[4]);
  if ((flags & ~(kExitedSignaled | kExitedStopped)) != 0) {
    throw Error("protocol error: exited frame with unknown flags " + std::to_string(flags));
  }
  return {get_u32(payload, 0), (flags & kExitedSignaled) != 0, get_u32(payload, 5),
          (flags & kExitedStopped) != 0};
}

int decode_signal(std::string_view payload) {
  require_size(payload, 1, "signal");
  const int signal = static_cast<uint8_t>(payload[0]);
  if (payload.size() != 1 || (signal != SIGUSR1 && signal != SIGUSR2)) {
    throw Error(
        fmt::format("protocol error: a signal frame for signal {} ({} bytes); only "
                    "SIGUSR1 and SIGUSR2 are forwarded",
                    signal, payload.size()));
  }
  return signal;
}

std::string encode_rank_event(const RankEvent& event) {
  std::string out;
  put_u32(out, event.worker);
  out += event.line;
  return out;
}

std::string encode_rank_report(const RankReport& report) {
  std::string out;
  put_u32(out, report.rank);
  out += report.line;
  return out;
}

RankReport decode_rank_report(std::string_view payload) {
  require_size(payload, 4, "rank report");
  std::string_view line = payload.substr(4);
  if (line.size() > contract::kMaxReportLine || line.find('\n') != std::string_view::npos) {
    throw Error(fmt::format("protocol error: a rank report of {} bytes (at most {}, one line)",
                            line.size(), contract::kMaxReportLine));
  }
  return {get_u32(payload, 0), std::string(line)};
}

std::string encode_generation(const GenerationNotice& notice) {
  std::string out;
  put_u32(out, notice.generation);
  put_u32(out, static_cast<uint32_t>(notice.workers.size()));
  for (uint32_t w : notice.workers) put_u32(out, w);
  return out;
}

RankEvent decode_rank_event(std::string_view payload) {
  require_size(payload, 4, "rank event");
  std::string_view line = payload.substr(4);
  if (line.size() > kMaxRankEventLine || line.find('\n') != std::string_view::npos) {
    throw Error(fmt::format("protocol error: a rank event of {} bytes (at most {}, one line)",
                            line.size(), kMaxRankEventLine));
  }
  return {get_u32(payload, 0), std::string(line)};
}

GenerationNotice decode_generation(std::string_view payload) {
  require_size(payload, 8, "generation");
  const uint32_t count = get_u32(payload, 4);
  if (payload.size() != 8 + 4 * static_cast<uint64_t>(count)) {
    throw Error(fmt::format("protocol error: a generation frame of {} bytes for {} workers",
                            payload.size(), count));
  }
  GenerationNotice notice{get_u32(payload, 0), {}};
  for (uint32_t i = 0; i < count; ++i) notice.workers.push_back(get_u32(payload, 8 + 4 * i));
  return notice;
}

}  // namespace hvd::agent
