// The network probe's frame payloads (agent/probe.h): the listen request and the probe request
// the agent reads, the listening port and the probe results the launcher reads. The first byte
// picks the decoder. hvd::Error is the documented refusal. Property: what is accepted decodes to
// the same value after being encoded again.
#include "agent/probe.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace w = hvd::agent;

bool same(const w::ProbeTarget& a, const w::ProbeTarget& b) {
  return a.id == b.id && a.address == b.address && a.port == b.port && a.token == b.token;
}
bool same(const w::ProbeOutcome& a, const w::ProbeOutcome& b) {
  return a.id == b.id && a.status == b.status && a.ms == b.ms && a.detail == b.detail;
}
template <class T>
bool same_all(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hvd::fuzz::accepted;
  if (size == 0) return 0;
  const std::string_view text = hvd::fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      if (const auto v = accepted<hvd::Error>([&] { return w::decode_probe_listen(text); })) {
        const auto again = w::decode_probe_listen(w::encode_probe_listen(*v));
        HVD_FUZZ_CHECK(again.range == v->range && again.token == v->token);
      }
      break;
    case 1:
      if (const auto port = accepted<hvd::Error>([&] { return w::decode_listening(text); })) {
        HVD_FUZZ_CHECK(w::decode_listening(w::encode_listening(*port)) == *port);
      }
      break;
    case 2:
      if (const auto v = accepted<hvd::Error>([&] { return w::decode_probe_request(text); })) {
        const auto again = w::decode_probe_request(w::encode_probe_request(*v));
        HVD_FUZZ_CHECK(again.timeout_ms == v->timeout_ms && same_all(again.targets, v->targets));
      }
      break;
    default:
      if (const auto v = accepted<hvd::Error>([&] { return w::decode_probe_results(text); })) {
        HVD_FUZZ_CHECK(same_all(w::decode_probe_results(w::encode_probe_results(*v)), *v));
      }
      break;
  }
  return 0;
}
