// The job spec as the agent reads it from a kSpec frame (agent/job_spec.h): JSON, with bytes
// that are not UTF-8 as {"base64": ...}. hvd::Error is the documented refusal. Property: an
// accepted spec, encoded and decoded again, is the same spec.
#include "agent/job_spec.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hvd::agent::JobSpec spec;
  try {
    spec = hvd::agent::decode_spec(hvd::fuzz::as_text(data, size));
  } catch (const hvd::Error&) {
    return 0;
  }
  HVD_FUZZ_CHECK(hvd::agent::decode_spec(hvd::agent::encode_spec(spec)) == spec);
  return 0;
}
