// Elastic training's world document as every rank reads it from the rendezvous store
// (contract/elastic.h, decode_world). ContractError is the documented refusal. Properties: an
// accepted document describes a world libhvd can build (every rank once, coordinates in range),
// and encode_world() writes it back (its reason on one line) to a text that decodes to the same
// document. encode_world() refusing an accepted document is a finding: the two would disagree on
// what a world is.
#include <algorithm>

#include "common/error.h"
#include "contract/elastic.h"
#include "tests/fuzz/fuzz_support.h"

namespace c = hvd::contract;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto doc = hvd::fuzz::accepted<hvd::ContractError>(
      [&] { return c::decode_world(hvd::fuzz::as_text(data, size)); });
  if (!doc) return 0;
  HVD_FUZZ_CHECK(doc->size() >= 1 && doc->size() <= c::kMaxWorldSize);
  HVD_FUZZ_CHECK(doc->sync_root >= 0 && doc->sync_root < doc->size());
  for (int r = 0; r < doc->size(); ++r) {
    const c::RankTopology& t = doc->workers[static_cast<size_t>(r)].topology;
    HVD_FUZZ_CHECK(t.rank == r && t.size == doc->size());
    HVD_FUZZ_CHECK(t.local_rank >= 0 && t.local_rank < t.local_size);
    HVD_FUZZ_CHECK(t.cross_rank >= 0 && t.cross_rank < t.cross_size);
    HVD_FUZZ_CHECK(doc->find_worker(doc->workers[static_cast<size_t>(r)].worker) != nullptr);
  }
  // encode_world() writes the reason on one line: CR and LF become spaces (a CR in a decoded
  // reason is kept; regressions/world/reason-with-cr).
  c::WorldDoc expected = *doc;
  std::replace_if(
      expected.reason.begin(), expected.reason.end(), [](char ch) { return ch == '\r'; }, ' ');
  HVD_FUZZ_CHECK(c::decode_world(c::encode_world(*doc)) == expected);
  return 0;
}
