// Whether Debian's python3-torch is there (/usr/bin/python3 imports torch), for the tests that
// run real PyTorch ranks (tests/e2e/test_pytorch.cpp, test_why.cpp); asked once per process.
// scripts/install-deps.sh --torch installs it; .ci/run does.
#pragma once

#include <chrono>

#include "tests/cli/process.h"

namespace hvd::test {

inline bool have_torch() {
  static const bool yes =
      run_program({"/usr/bin/python3", "-c", "import torch"}, {}, std::chrono::seconds(60))
          .exit_code == 0;
  return yes;
}

}  // namespace hvd::test
