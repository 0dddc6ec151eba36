// The mpirun launcher (`hvdrun --mpi`): Open MPI's mpirun as a child with the command line from
// mpi_command.h. Across hosts it first runs the native launcher's network check (its agents log
// in, probe each other and start nothing), which also tells mpirun's interface list and whether
// two hosts are one machine. mpirun's tagged output is parsed back into ranks and streams and
// goes through the same supervisor as native mode (supervisor.h); SIGINT/SIGTERM are forwarded;
// the exit code is mpirun's, which is the failed rank's.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/core/launcher.h"
#include "launcher/mpirun/mpi_command.h"
#include "launcher/mpirun/mpirun_options.h"
#include "launcher/mpirun/mpirun_output.h"

namespace hvd::launcher {

class MpiLauncher final : public Launcher {
 public:
  MpiLauncher(LaunchOptions options, MpirunOptions own)
      : options_(std::move(options)), own_(std::move(own)) {}
  static std::unique_ptr<Launcher> make(LaunchOptions options, MpirunOptions own);
  // Its registry line's flags and refusals (launcher/registry.cpp).
  static constexpr std::array<LauncherFlag, 1> kFlags{{
      {"--mpi", "Launch through Open MPI's mpirun (same checks, output and exit codes)"},
  }};
  static constexpr LauncherCheck kCheckBuild{
      .key = "mpi",
      .label = "MPI mode (--mpi)",
      .probe = &mpirun_version_line,
      .probe_key = "mpirun",
      .missing = "mpirun not found on PATH (install openmpi-bin)"};
  static constexpr std::array<Refusal, 4> kRefusals{{
      {Capability::kElastic,
       "elastic training (--min-np) needs the native launch: MPI_COMM_WORLD cannot change size",
       "drop --mpi; libhvd then runs its collectives over Gloo"},
      {Capability::kGpusPerRank,
       "--gpus-per-rank works in native mode only: mpirun gives every rank the same environment",
       "drop --mpi, or leave CUDA_VISIBLE_DEVICES alone and use hvd::gpu_device() (local rank "
       "modulo the visible GPUs)"},
      {Capability::kPortRange, "--port-range works in native mode only",
       "drop --mpi (mpirun opens its own ports: pin them with --mpi-args, e.g. \"--mca "
       "btl_tcp_port_min_v4 LOW --mca btl_tcp_port_range_v4 N\")"},
      // mpirun calls its agent with the host alone (launcher/native/rsh_launch.h).
      {Capability::kRshUserPort,
       "--mpi --rsh-agent '{}': under --mpi, mpirun starts its daemons knowing only each host's "
       "name, so {{user}} and {{port}} cannot be filled in",
       "write the user and port into the template, or launch without --mpi"},
  }};

  std::string_view name() const override { return "mpirun"; }
  std::vector<LaunchCommand> describe(const Plan& plan) const override;
  // mpirun's daemons start as the native agents would (srun only inside an allocation).
  void check(const Plan& plan) const override;
  LaunchResult run(const Plan& plan) override;

 private:
  LaunchOptions options_;
  MpirunOptions own_;  // --mpi-args, --binding-args
};

}  // namespace hvd::launcher
