// The job spec as the agent reads it from a kSpec frame (worker/job_spec.h): JSON, with bytes
// that are not UTF-8 as {"base64": ...}. hvd::Error is the documented refusal. Property: an
// accepted spec, encoded and decoded again, is the same spec.
#include "worker/job_spec.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hvd::worker::JobSpec spec;
  try {
    spec = hvd::worker::decode_spec(hvd::fuzz::as_text(data, size));
  } catch (const hvd::Error&) {
    return 0;
  }
  HVD_FUZZ_CHECK(hvd::worker::decode_spec(hvd::worker::encode_spec(spec)) == spec);
  return 0;
}
