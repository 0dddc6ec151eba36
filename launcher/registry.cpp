#include "launcher/registry.h"

#include <fmt/format.h>

#include <array>
#include <string>

#include "launcher/mpirun/mpi_launcher.h"
#include "launcher/native/native_launcher.h"

namespace hvd::launcher {
namespace {

// Every launcher: its name (--json's "launcher"), what it is, how it is made, the flags that
// choose it and what it refuses. One line each.
constexpr std::array<LauncherEntry, 2> kLaunchers{{
    {"native", "hvdrun's agent on every host (SSH or a local child); Gloo in the ranks",
     [](LaunchOptions o, const LauncherOptions&) { return NativeLauncher::make(std::move(o)); },
     NativeLauncher::kFlags, NativeLauncher::kRefusals, NativeLauncher::kCheckBuild},
    {"mpirun", "Open MPI's mpirun (--mpi); MPI in the ranks",
     [](LaunchOptions o, const LauncherOptions& own) {
       return MpiLauncher::make(std::move(o), own.mpirun);
     },
     MpiLauncher::kFlags, MpiLauncher::kRefusals, MpiLauncher::kCheckBuild},
}};

}  // namespace

std::span<const LauncherEntry> launchers() { return kLaunchers; }

const LauncherEntry& launcher_entry(std::string_view name) {
  for (const LauncherEntry& e : kLaunchers) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const LauncherEntry& e : kLaunchers)
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw UsageError("no launcher called '" + std::string(name) + "'", "the launchers: " + known);
}

std::unique_ptr<Launcher> make_launcher(std::string_view name, LaunchOptions options,
                                        const LauncherOptions& own) {
  return launcher_entry(name).make(std::move(options), own);
}

const Refusal* refusal(std::string_view name, Capability capability) {
  for (const Refusal& r : launcher_entry(name).refusals) {
    if (r.capability == capability) return &r;
  }
  return nullptr;
}

void require(std::string_view name, Capability capability, std::string_view value) {
  if (const Refusal* r = refusal(name, capability)) {
    throw UsageError(fmt::format(fmt::runtime(r->what), value), std::string(r->hint));
  }
}

LaunchResult check_network(LaunchOptions options, const Plan& plan) {
  return NativeLauncher(std::move(options)).check_network(plan);
}

}  // namespace hvd::launcher
