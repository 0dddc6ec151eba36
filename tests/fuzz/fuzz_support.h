// Shared by the fuzz harnesses (tests/fuzz/README.md): the libFuzzer entry point's signature and
// a check that aborts, so that a broken property is a crash libFuzzer reports and saves, and a
// failed replay in ctest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace hvd::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void check_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace hvd::fuzz

// A property the harness asserts (a round trip, an invariant of the result): abort when false.
#define HVD_FUZZ_CHECK(cond) \
  ((cond) ? (void)0 : ::hvd::fuzz::check_failed(#cond, __FILE__, __LINE__))

namespace hvd::fuzz {

// decode() under the harness's documented refusal `Refusal`: the value, or nullopt when the
// input was refused. Anything else escapes (a finding). The round-trip checks call decoders
// outside this, so an encoder's output that its decoder refuses is a finding too.
template <class Refusal, class Decode>
auto accepted(Decode&& decode) -> std::optional<decltype(decode())> {
  try {
    return decode();
  } catch (const Refusal&) {
    return std::nullopt;
  }
}

}  // namespace hvd::fuzz
