// The mpirun launcher's own options (`hvdrun --mpi`): what no other launcher reads. The CLI fills
// them from --mpi-args and --binding-args (cli/launch_setup.cpp); the registry hands them to
// MpiLauncher alone (LauncherOptions, launcher/registry.h). What every launcher reads is
// LaunchOptions (launcher/core/launcher.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

struct MpirunOptions {
  std::string program = "mpirun";       // the mpirun to run (found on PATH)
  std::vector<std::string> extra_args;  // --mpi-args, split into words
  // --binding-args, in words: instead of hvdrun's "-bind-to none -map-by slot".
  std::optional<std::vector<std::string>> binding_args;
};

}  // namespace hvd::launcher
