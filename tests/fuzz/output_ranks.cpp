// `--output-ranks` lists (launcher/core/output_router.h, parse_rank_list). UsageError is the
// documented refusal. Properties: sorted, each rank once, 0..1048575; written back as a comma
// list it parses to the same ranks.
#include "common/error.h"
#include "launcher/core/output_router.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto ranks = hvd::fuzz::accepted<hvd::Error>(
      [&] { return hvd::launcher::parse_rank_list(hvd::fuzz::as_text(data, size)); });
  if (!ranks) return 0;
  HVD_FUZZ_CHECK(!ranks->empty());
  // Written back as runs (LOW-HIGH for consecutive ranks, a lone rank alone): a list of 100000
  // ranks spelled one by one made each input take seconds, and libFuzzer's 10 s limit was hit.
  std::string again;
  for (std::size_t i = 0; i < ranks->size();) {
    HVD_FUZZ_CHECK((*ranks)[i] >= 0 && (*ranks)[i] < (1 << 20));
    if (i > 0) HVD_FUZZ_CHECK((*ranks)[i - 1] < (*ranks)[i]);
    std::size_t j = i;
    while (j + 1 < ranks->size() && (*ranks)[j + 1] == (*ranks)[j] + 1) ++j;
    again += (i > 0 ? "," : "") + std::to_string((*ranks)[i]);
    if (j > i) again += "-" + std::to_string((*ranks)[j]);
    i = j + 1;
  }
  HVD_FUZZ_CHECK(ranks->back() < (1 << 20));
  HVD_FUZZ_CHECK(hvd::launcher::parse_rank_list(again) == *ranks);
  return 0;
}
