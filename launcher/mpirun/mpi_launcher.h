// The mpirun launcher (`hvdrun --mpi`): Open MPI's mpirun as a child with the command line from
// mpi_command.h. Across hosts it first runs the native launcher's network check (its agents log
// in, probe each other and start nothing), which also tells mpirun's interface list and whether
// two hosts are one machine. mpirun's tagged output is parsed back into ranks and streams and
// goes through the same supervisor as native mode (supervisor.h); SIGINT/SIGTERM are forwarded;
// the exit code is mpirun's, which is the failed rank's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/core/launcher.h"
#include "launcher/mpirun/mpirun_output.h"

namespace hvd::launcher {

class MpiLauncher final : public Launcher {
 public:
  explicit MpiLauncher(LaunchOptions options) : options_(std::move(options)) {}
  static std::unique_ptr<Launcher> make(LaunchOptions options);

  std::string_view name() const override { return "mpirun"; }
  std::vector<LaunchCommand> describe(const Plan& plan) const override;
  // mpirun's daemons start as the native agents would (srun only inside an allocation).
  void check(const Plan& plan) const override;
  LaunchResult run(const Plan& plan) override;

 private:
  LaunchOptions options_;
};

}  // namespace hvd::launcher
