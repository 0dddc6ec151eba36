// Small helpers shared by the unit tests.
#pragma once

#include <string>
#include "tests/support/catch.h"

#include "common/error.h"

namespace hvd::test {

// Runs `fn`, requires a UsageError whose message contains `what` and whose hint contains `hint`.
template <typename Fn>
void require_usage_error(Fn&& fn, const std::string& what, const std::string& hint = "") {
  try {
    fn();
    FAIL("expected a UsageError containing: " << what);
  } catch (const UsageError& e) {
    INFO("message: " << e.what() << "\nhint: " << e.hint());
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring(what));
    if (!hint.empty()) CHECK_THAT(e.hint(), Catch::Matchers::ContainsSubstring(hint));
    CHECK(e.exit_code() == ExitCode::kUsage);
  }
}

}  // namespace hvd::test
