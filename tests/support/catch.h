// Catch2 for every test: v3 (Debian 13) or v2 (Debian 12), chosen by tests/CMakeLists.txt from
// the Catch2 it found (HVD_CATCH_MAJOR). Tests include this header, never Catch2's own, and are
// written in v3's names; the v2 branch adds what v2 spells otherwise. It goes when Debian 12 does.
#pragma once

#if HVD_CATCH_MAJOR == 3
#include <catch2/catch_test_macros.hpp>
#include <catch2/catch_tostring.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#elif HVD_CATCH_MAJOR == 2
#include <catch2/catch.hpp>

#include <string>

namespace Catch::Matchers {
// v3's name for the substring matcher (v3 keeps `Contains` for ranges).
inline StdString::ContainsMatcher ContainsSubstring(const std::string& text,
                                                    CaseSensitive::Choice cs = CaseSensitive::Yes) {
  return Contains(text, cs);
}
}  // namespace Catch::Matchers
#else
#error "HVD_CATCH_MAJOR must be 2 or 3 (set by tests/CMakeLists.txt from the Catch2 it found)"
#endif
