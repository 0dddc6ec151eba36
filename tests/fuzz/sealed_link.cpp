// The sealed link's parsers of network bytes (agent/sealed_link.h), as the launcher reads a
// connection to its srun listener and either side reads records: an agent's hello (answered with
// the launcher's reply when whole), then records opened in pieces whose sizes the first bytes
// choose. SealError is the documented refusal. Properties: a whole hello is exactly as long as
// it says; what is opened is what a sealer with the same key sealed (the input, sealed, opens to
// itself in any chunking); random records are refused, never opened.
#include "agent/sealed_link.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace w = hvd::agent;

const w::SealKey kKey{1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                      17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const size_t piece = static_cast<size_t>(data[0]) * 64 + data[1] + 1;
  const std::string_view bytes = hvd::fuzz::as_text(data + 2, size - 2);

  if (const auto hello =
          hvd::fuzz::accepted<w::SealError>([&] { return w::parse_seal_hello(bytes); });
      hello && *hello) {
    HVD_FUZZ_CHECK((*hello)->size ==
                   w::kSealMagic.size() + 1 + (*hello)->node.size() + w::kSealKeyBytes);
    HVD_FUZZ_CHECK((*hello)->size <= bytes.size());
    hvd::fuzz::accepted<w::SealError>([&] {
      w::LauncherHandshake launcher("secret", bytes.substr(0, (*hello)->size));
      HVD_FUZZ_CHECK(launcher.reply().size() == w::kSealReplyBytes);
      HVD_FUZZ_CHECK(!launcher.check_proof(bytes.substr(0, w::kSealKeyBytes)));
      return 0;
    });
  }

  // The input as records: refused, or (a forged tag being out of reach) nothing opened.
  w::RecordOpener opener(kKey, "the fuzzer");
  std::string out;
  const auto opened = hvd::fuzz::accepted<w::SealError>([&] {
    for (size_t at = 0; at < bytes.size(); at += piece) opener.open(bytes.substr(at, piece), out);
    return true;
  });
  HVD_FUZZ_CHECK(out.empty());
  if (opened) HVD_FUZZ_CHECK(opener.pending() == bytes.size());

  // The input sealed opens to itself, in pieces.
  w::RecordSealer sealer(kKey);
  const std::string sealed = sealer.seal(bytes);
  w::RecordOpener reader(kKey, "the fuzzer");
  std::string back;
  for (size_t at = 0; at < sealed.size(); at += piece) {
    reader.open(std::string_view(sealed).substr(at, piece), back);
  }
  HVD_FUZZ_CHECK(back == bytes);
  HVD_FUZZ_CHECK(reader.pending() == 0);
  return 0;
}
