// The registry: every launcher by name. registry.cpp is the only file of the launcher wing that
// names the concrete launchers (launcher/native/, launcher/mpirun/); the CLI builds a launcher
// through it.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "launcher/core/launcher.h"
#include "launcher/mpirun/mpirun_options.h"

namespace hvd::launcher {

// Each launcher's own options, as the flags gave them: one member per launcher that has any (what
// every launcher reads is LaunchOptions). The CLI fills it; the registry hands each launcher its
// member.
struct LauncherOptions {
  MpirunOptions mpirun;  // --mpi-args, --binding-args
};

// The registry: every launcher by name.
struct LauncherEntry {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<Launcher> (*make)(LaunchOptions options, const LauncherOptions& own);
  std::span<const LauncherFlag> flags;  // the flags that choose it (cli/options.cpp defines them)
  std::span<const Refusal> refusals;    // what it cannot do (launcher/core/launcher.h)
  LauncherCheck check_build;            // its row in --check-build (cli/check_build.cpp)
};
std::span<const LauncherEntry> launchers();
// Throws UsageError for a name no launcher has.
const LauncherEntry& launcher_entry(std::string_view name);
std::unique_ptr<Launcher> make_launcher(std::string_view name, LaunchOptions options,
                                        const LauncherOptions& own = {});

// How launcher `name` refuses `capability`, or nullptr when it supports it.
const Refusal* refusal(std::string_view name, Capability capability);
// Throws the launcher's UsageError when it refuses `capability`; `value` fills the message's
// "{}" (the flag's value, where it quotes it).
void require(std::string_view name, Capability capability, std::string_view value = {});

// --check-net: the native launcher's agents start on every host and probe each other; no rank
// starts (the result's `net` and `hosts` say what they found).
LaunchResult check_network(LaunchOptions options, const Plan& plan);

}  // namespace hvd::launcher
