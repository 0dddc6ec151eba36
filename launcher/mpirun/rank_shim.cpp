#include "launcher/mpirun/rank_shim.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/error.h"
#include "contract/env_table.h"
#include "launcher/plan/rank_defaults.h"

namespace hvd::launcher {
namespace {

std::string value_of(const contract::EnvGetter& getenv, std::string_view name) {
  const char* v = getenv(std::string(name).c_str());
  return v == nullptr ? std::string() : std::string(v);
}

constexpr std::string_view kHint =
    "hvdrun --rank-shim is started by `hvdrun --mpi` through mpirun; run your command with "
    "hvdrun instead of calling the shim yourself";

int number(const contract::EnvGetter& getenv, std::string_view name) {
  const std::string text = value_of(getenv, name);
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0) {
    throw ContractError(text.empty()
                            ? fmt::format("{} is not set", name)
                            : fmt::format("{}='{}' is not a non-negative integer", name, text),
                        std::string(kHint));
  }
  return v;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

}  // namespace

std::string format_rank_layout(const std::vector<int>& ranks_per_host) {
  return fmt::format("{}", fmt::join(ranks_per_host, ","));
}

std::vector<std::pair<std::string, std::string>> rank_shim_env(const contract::EnvGetter& getenv) {
  const int rank = number(getenv, "OMPI_COMM_WORLD_RANK");
  const int size = number(getenv, "OMPI_COMM_WORLD_SIZE");
  const int local_rank = number(getenv, "OMPI_COMM_WORLD_LOCAL_RANK");
  const std::string layout_text = value_of(getenv, contract::kRankLayout.name);
  std::vector<int> layout;
  for (const std::string& part : split(layout_text)) {
    int n = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || n < 1) {
      throw ContractError(fmt::format("{}='{}' is not a list of rank counts such as 2,2",
                                      contract::kRankLayout.name, layout_text),
                          std::string(kHint));
    }
    layout.push_back(n);
  }
  const std::vector<std::string> hosts = split(value_of(getenv, contract::kRankHosts.name));
  if (hosts.size() != layout.size()) {
    throw ContractError(fmt::format("{} names {} hosts, {} has {}", contract::kRankHosts.name,
                                    hosts.size(), contract::kRankLayout.name, layout.size()),
                        std::string(kHint));
  }
  const std::vector<contract::RankPlacement> placements = contract::compute_topology(layout);
  if (static_cast<int>(placements.size()) != size || rank >= size) {
    throw ContractError(
        fmt::format("mpirun started rank {} of {}, but hvdrun planned {} ranks", rank, size,
                    placements.size()),
        "mpirun's own options (--mpi-args -np or a hostfile) must not change the ranks hvdrun "
        "planned");
  }
  const contract::RankPlacement& p = placements[static_cast<std::size_t>(rank)];
  if (p.topology.local_rank != local_rank) {
    throw ContractError(
        fmt::format("mpirun placed rank {} as local rank {} on its host; hvdrun planned local "
                    "rank {} on {}",
                    rank, local_rank, p.topology.local_rank,
                    hosts[static_cast<std::size_t>(p.host_index)]),
        "mpirun's own mapping options (--mpi-args -map-by, -npernode, ...) must not move ranks: "
        "hvdrun maps by slot, Horovod's order");
  }
  std::vector<std::pair<std::string, std::string>> env = contract::topology_env(p);
  env.emplace_back(contract::kHorovodHostname.name, hosts[static_cast<std::size_t>(p.host_index)]);
  // The same defaults a native launch gives (launcher/plan/rank_defaults.h).
  const auto is_set = [&](std::string_view name) {
    return getenv(std::string(name).c_str()) != nullptr;
  };
  for (auto& kv : rank_defaults(p.topology.local_size, is_set)) env.push_back(std::move(kv));
  return env;
}

namespace {

// Where the daemon shim keeps the TMPDIR it replaced: "=" then the value, or "-" when unset.
constexpr const char* kTmpdirWas = "HVD_DAEMON_TMPDIR_WAS";

// Gives a rank the TMPDIR its daemon had before the daemon shim changed it.
void restore_tmpdir() {
  const char* was = std::getenv(kTmpdirWas);
  if (was == nullptr) return;
  if (was[0] == '=') {
    ::setenv("TMPDIR", was + 1, 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  ::unsetenv(kTmpdirWas);
}

int exec_command(const char* who, const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int e = errno;
  std::fprintf(stderr, "hvdrun %s: cannot execute %s: %s\n", who, command.front().c_str(),
               std::strerror(e));
  return e == ENOENT ? 127 : 126;
}

}  // namespace

int exec_orted_shim(const std::vector<std::string>& args) {
  if (args.size() < 2) {
    std::fputs("hvdrun --orted-shim: usage: hvdrun --orted-shim BASE COMMAND...\n", stderr);
    return 70;
  }
  const std::string& base = args[0];
  if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "hvdrun --orted-shim: cannot create %s: %s\n", base.c_str(),
                 std::strerror(errno));
    return 70;
  }
  struct stat st {};
  if (::lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    std::fprintf(stderr, "hvdrun --orted-shim: %s is not a directory of this user's\n",
                 base.c_str());
    return 70;
  }
  std::string dir = base + "/orted.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "hvdrun --orted-shim: cannot create a directory in %s: %s\n", base.c_str(),
                 std::strerror(errno));
    return 70;
  }
  const char* was = std::getenv("TMPDIR");
  ::setenv(kTmpdirWas, was != nullptr ? (std::string("=") + was).c_str() : "-", 1);
  ::setenv("TMPDIR", dir.c_str(), 1);
  return exec_command("--orted-shim", std::vector<std::string>(args.begin() + 1, args.end()));
}

int exec_rank_shim(const std::vector<std::string>& command) {
  if (command.empty()) {
    std::fputs("hvdrun --rank-shim: no command to run\n", stderr);
    return 70;
  }
  restore_tmpdir();
  try {
    for (const auto& [name, value] : rank_shim_env(std::getenv)) {
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "hvdrun --rank-shim: %s\n  hint: %s\n", e.what(), e.hint().c_str());
    return 70;
  }
  // Internal to hvdrun and the shim: the command does not need them.
  ::unsetenv(std::string(contract::kRankLayout.name).c_str());
  ::unsetenv(std::string(contract::kRankHosts.name).c_str());
  return exec_command("--rank-shim", command);
}

}  // namespace hvd::launcher
