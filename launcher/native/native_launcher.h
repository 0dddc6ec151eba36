// The native launcher (the default): hvdrun's own agent on every host (`hvdrun --agent`: a local
// child, or over one SSH session per remote host, which is also that host's SSH check; or
// through srun, or a command of the user's: agent_launch.h), the
// network check between the hosts before any rank starts, the rendezvous server the ranks
// bootstrap from, then the ranks; their output tagged on the console, the first failing rank
// stops the job, Ctrl-C and SIGTERM forwarded, and an honest result (docs/exit-codes.md).
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "launcher/core/launcher.h"

namespace hvd::launcher {

class NativeLauncher final : public Launcher {
 public:
  explicit NativeLauncher(LaunchOptions options) : options_(std::move(options)) {}
  static std::unique_ptr<Launcher> make(LaunchOptions options);
  // Its registry line's flags and refusals (launcher/registry.cpp).
  static constexpr std::array<LauncherFlag, 2> kFlags{{
      {"--native", "Launch with hvdrun's own agents (the default)"},
      {"--gloo", "horovodrun's name for the native launch (its ranks' collectives run over Gloo)"},
  }};
  static constexpr LauncherCheck kCheckBuild{.key = "native", .label = "native launch"};
  static constexpr std::array<Refusal, 2> kRefusals{{
      {Capability::kMpiArgs, "--mpi-args was given without --mpi",
       "add --mpi to launch through mpirun, or drop --mpi-args"},
      {Capability::kBindingArgs,
       "--binding-args: only mpirun binds ranks (with --mpi); the native launch leaves them "
       "unbound, as horovodrun's Gloo launch does",
       ""},
  }};

  std::string_view name() const override { return "native"; }
  std::vector<LaunchCommand> describe(const Plan& plan) const override;
  // Each remote host's SSH destination after the SSH config (its Port and User).
  Plan shown(const Plan& plan) const override;
  // The agent launch must exist here (srun only inside an allocation) and, for elastic
  // training, be able to start a joining host's agent.
  void check(const Plan& plan) const override;
  LaunchResult run(const Plan& plan) override;
  // The network check alone (`--check-net`, and the mpirun launcher's check across hosts): the
  // agents start and probe each other; no rank starts. The result's `net` and `hosts` say what
  // they found.
  LaunchResult check_network(const Plan& plan);

 private:
  LaunchResult launch(const Plan& plan, bool check_net_only);
  LaunchOptions options_;
};

}  // namespace hvd::launcher
