// libhvd's control-plane messages (allreduce/engine/messages.h): the request lists rank 0 reads
// from every rank and the response lists every rank reads from rank 0, and under MPI the
// negotiation cycles' contributions (also as framed with eager data) and the control plane's
// signals between cycles. The first byte picks the decoder (below 0x80: its low bit, requests or
// responses; from 0x80: its low bit, a contribution or a signal). StatusError(HVD_ERR_INTERNAL) is
// the documented refusal. Property: the decoders are strict (no trailing bytes, enums in range),
// so encode(decode(x)) is x up to the one byte that is a flag (any non-zero reads as true), and
// decoding that again gives the same bytes.
#include "allreduce/api/status_error.h"
#include "allreduce/engine/messages.h"
#include "tests/fuzz/fuzz_support.h"

namespace r = hvd::runtime;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hvd::fuzz::accepted;
  if (size == 0) return 0;
  const std::string_view bytes = hvd::fuzz::as_text(data + 1, size - 1);
  const unsigned pick = (data[0] & 0x80) != 0 ? 2 + (data[0] & 1) : data[0] & 1;
  if (pick == 2) {
    // The same bytes as a framed contribution (head, eager data, trailer): framing the parts
    // again gives a message of the same length (the padding's bytes are not read).
    if (const auto f = accepted<r::StatusError>([&] { return r::unframe_contribution(bytes); })) {
      std::string again(f->head);
      r::frame_contribution(again, f->data);
      HVD_FUZZ_CHECK(again.size() == bytes.size());
      HVD_FUZZ_CHECK(r::unframe_contribution(again).data == f->data);
    }
    if (const auto v = accepted<r::StatusError>([&] { return r::decode_contribution(bytes); })) {
      const std::string wire = r::encode(*v);  // the request list's flag byte may change
      HVD_FUZZ_CHECK(wire.size() == bytes.size());
      HVD_FUZZ_CHECK(r::encode(r::decode_contribution(wire)) == wire);
    }
  } else if (pick == 3) {
    if (const auto v = accepted<r::StatusError>([&] { return r::decode_signal(bytes); })) {
      HVD_FUZZ_CHECK(r::encode(*v) == bytes);
    }
  } else if (pick == 0) {
    if (const auto v = accepted<r::StatusError>([&] { return r::decode_requests(bytes); })) {
      const std::string wire = r::encode(*v);
      HVD_FUZZ_CHECK(wire.size() == bytes.size() && wire.substr(1) == bytes.substr(1));
      HVD_FUZZ_CHECK(r::encode(r::decode_requests(wire)) == wire);
    }
  } else {
    if (const auto v = accepted<r::StatusError>([&] { return r::decode_responses(bytes); })) {
      const std::string wire = r::encode(*v);
      HVD_FUZZ_CHECK(wire == bytes);
      HVD_FUZZ_CHECK(r::encode(r::decode_responses(wire)) == wire);
    }
  }
  return 0;
}
