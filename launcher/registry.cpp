#include "launcher/registry.h"

#include <array>
#include <string>

#include "launcher/mpirun/mpi_launcher.h"
#include "launcher/native/native_launcher.h"

namespace hvd::launcher {
namespace {

// Every launcher, by the name its flag gives (cli/options.cpp): one line each.
constexpr std::array<LauncherEntry, 2> kLaunchers{{
    {"native", "hvdrun's agent on every host (SSH or a local child); Gloo in the ranks",
     &NativeLauncher::make},
    {"mpirun", "Open MPI's mpirun (--mpi); MPI in the ranks", &MpiLauncher::make},
}};

}  // namespace

std::span<const LauncherEntry> launchers() { return kLaunchers; }

std::unique_ptr<Launcher> make_launcher(std::string_view name, LaunchOptions options) {
  for (const LauncherEntry& e : kLaunchers) {
    if (e.name == name) return e.make(std::move(options));
  }
  std::string known;
  for (const LauncherEntry& e : kLaunchers)
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw UsageError("no launcher called '" + std::string(name) + "'", "the launchers: " + known);
}

LaunchResult check_network(LaunchOptions options, const Plan& plan) {
  return NativeLauncher(std::move(options)).check_network(plan);
}

}  // namespace hvd::launcher
