// --port-range and HVD_PORT_RANGE values (common/port_range.h, parse_port_range): nullopt is the
// documented refusal, and nothing may throw. Properties: an accepted range is 1 <= low <= high
// <= 65535 and its text() parses back to it.
#include "common/port_range.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto range = hvd::parse_port_range(hvd::fuzz::as_text(data, size));
  if (!range) return 0;
  HVD_FUZZ_CHECK(range->low >= 1 && range->low <= range->high && range->high <= 65535);
  HVD_FUZZ_CHECK(hvd::parse_port_range(range->text()) == range);
  return 0;
}
