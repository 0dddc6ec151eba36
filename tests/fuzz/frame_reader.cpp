// The agent protocol's frame decoder and packed payloads (agent/protocol.h), as the launcher and
// the agent read each other's bytes. The input is fed to a FrameReader in pieces whose sizes the
// first bytes choose; every frame that comes out is decoded by its type. hvd::Error is the
// documented refusal (a bad frame header, a malformed payload). Properties: each frame is the
// bytes encode_frame() would write for it, and every accepted payload decodes to the same value
// after being encoded again.
#include "agent/protocol.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace w = hvd::agent;

bool same(const w::OutputChunk& a, const w::OutputChunk& b) {
  return a.rank == b.rank && a.stream == b.stream && a.bytes == b.bytes;
}
bool same(const w::RankStarted& a, const w::RankStarted& b) {
  return a.rank == b.rank && a.pid == b.pid;
}
bool same(const w::RankExited& a, const w::RankExited& b) {
  return a.rank == b.rank && a.signaled == b.signaled && a.value == b.value &&
         a.stopped == b.stopped;
}
bool same(const w::RankEvent& a, const w::RankEvent& b) {
  return a.worker == b.worker && a.line == b.line;
}
bool same(const w::GenerationNotice& a, const w::GenerationNotice& b) {
  return a.generation == b.generation && a.workers == b.workers;
}

template <class T, class Decode, class Encode>
void round_trip(const std::string& payload, Decode decode, Encode encode, bool canonical) {
  const auto v = hvd::fuzz::accepted<hvd::Error>([&] { return decode(payload); });
  if (!v) return;
  const std::string wire = encode(static_cast<const T&>(*v));
  HVD_FUZZ_CHECK(same(*v, decode(wire)));
  // Decoders that take every byte of the payload: the encoding is the payload itself.
  if (canonical) HVD_FUZZ_CHECK(wire == payload);
}

void decode_payload(const w::Frame& frame) {
  switch (frame.type) {
    case w::FrameType::kOutput:
      round_trip<w::OutputChunk>(frame.payload, w::decode_output, w::encode_output, true);
      break;
    case w::FrameType::kStarted:  // trailing bytes are ignored
      round_trip<w::RankStarted>(frame.payload, w::decode_started, w::encode_started, false);
      break;
    case w::FrameType::kExited:
      round_trip<w::RankExited>(frame.payload, w::decode_exited, w::encode_exited, false);
      break;
    case w::FrameType::kRankEvent: {
      round_trip<w::RankEvent>(frame.payload, w::decode_rank_event, w::encode_rank_event, true);
      break;
    }
    case w::FrameType::kGeneration:
      round_trip<w::GenerationNotice>(frame.payload, w::decode_generation, w::encode_generation,
                                      true);
      break;
    case w::FrameType::kSignal:
      if (const auto sig =
              hvd::fuzz::accepted<hvd::Error>([&] { return w::decode_signal(frame.payload); })) {
        HVD_FUZZ_CHECK(w::encode_signal(*sig) == frame.payload);
      }
      break;
    case w::FrameType::kPing:
      if (const auto ms =
              hvd::fuzz::accepted<hvd::Error>([&] { return w::decode_ping(frame.payload); })) {
        HVD_FUZZ_CHECK(w::encode_ping(*ms) == frame.payload);
      }
      break;
    default:
      break;  // JSON payloads have their own harnesses (job_spec, hello, probe)
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // Two piece sizes (1..16 bytes) alternate, so frames are split at every kind of boundary.
  const size_t pieces[2] = {static_cast<size_t>(data[0] % 16) + 1,
                            static_cast<size_t>(data[1] % 16) + 1};
  const std::string_view bytes = hvd::fuzz::as_text(data + 2, size - 2);
  w::FrameReader reader;
  size_t fed = 0;
  size_t consumed = 0;
  try {
    for (int turn = 0; fed < bytes.size(); turn ^= 1) {
      const size_t n = std::min(pieces[turn], bytes.size() - fed);
      reader.feed(bytes.substr(fed, n));
      fed += n;
      while (const auto frame = reader.next()) {
        const std::string wire = w::encode_frame(frame->type, frame->payload);
        HVD_FUZZ_CHECK(bytes.substr(consumed, wire.size()) == wire);
        consumed += wire.size();
        decode_payload(*frame);
      }
      HVD_FUZZ_CHECK(reader.buffered() == fed - consumed);
    }
  } catch (const hvd::Error&) {
  }
  return 0;
}
