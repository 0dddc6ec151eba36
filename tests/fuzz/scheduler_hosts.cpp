// The scheduler host-list grammars (launcher/plan/scheduler_hosts.h). The first byte picks one:
// 0 Slurm's hostlist (SLURM_JOB_NODELIST), 1 its per-node counts (SLURM_TASKS_PER_NODE, for as
// many nodes as the second byte says), 2 one host per slot a line (PBS_NODEFILE,
// LSB_DJOB_HOSTFILE), 3 LSB_MCPU_HOSTS, 4 the whole choice of hosts from an environment
// (NAME=VALUE lines, then a line "---", then what every file named in it holds). UsageError is
// the documented refusal. Properties: the bounds each grammar promises (at most 100000 names, no
// empty name, counts 1..kMaxSlotsPerHost, one count per node).
#include <map>

#include "common/error.h"
#include "launcher/plan/scheduler_hosts.h"
#include "tests/fuzz/fuzz_support.h"

namespace l = hvd::launcher;

namespace {

void check_hosts(const std::vector<l::HostSpec>& hosts) {
  for (const l::HostSpec& h : hosts) {
    HVD_FUZZ_CHECK(!h.host.empty());
    HVD_FUZZ_CHECK(h.slots >= 1);  // a node file may list a host more than -H allows
  }
}

void choose(std::string_view text) {
  std::map<std::string, std::string> env;
  std::string_view file;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    if (line == "---") {
      file = text.substr(std::min(end + 1, text.size()));
      break;
    }
    const size_t eq = line.find('=');
    if (eq != std::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    start = end + 1;
  }
  const l::EnvLookup lookup = [&env](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  const l::FileLookup read = [file](const std::string&) -> std::optional<std::string> {
    if (file == "unreadable") return std::nullopt;
    return std::string(file);
  };
  const auto source = hvd::fuzz::accepted<hvd::UsageError>(
      [&] { return l::choose_hosts(std::nullopt, std::nullopt, lookup, read); });
  if (!source) return;
  check_hosts(source->hosts);
  HVD_FUZZ_CHECK(source->kind == "localhost" || !source->hosts.empty());
  HVD_FUZZ_CHECK(!source->default_np || *source->default_np >= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hvd::fuzz::accepted;
  if (size < 2) return 0;
  const std::string_view text = hvd::fuzz::as_text(data + 2, size - 2);
  switch (data[0] % 5) {
    case 0:
      if (const auto names = accepted<hvd::UsageError>(
              [&] { return l::expand_slurm_hostlist(text, "SLURM_JOB_NODELIST"); })) {
        HVD_FUZZ_CHECK(!names->empty() && names->size() <= 100000);
        for (const std::string& n : *names) HVD_FUZZ_CHECK(!n.empty());
      }
      break;
    case 1: {
      const size_t nodes = data[1];
      if (const auto counts = accepted<hvd::UsageError>(
              [&] { return l::expand_slurm_counts(text, nodes, "SLURM_TASKS_PER_NODE"); })) {
        HVD_FUZZ_CHECK(counts->size() == nodes);
        for (int n : *counts) HVD_FUZZ_CHECK(n >= 1 && n <= l::kMaxSlotsPerHost);
      }
      break;
    }
    case 2:
      if (const auto hosts = accepted<hvd::UsageError>(
              [&] { return l::hosts_from_slot_lines(text, "PBS_NODEFILE"); })) {
        HVD_FUZZ_CHECK(!hosts->empty());
        check_hosts(*hosts);
      }
      break;
    case 3:
      if (const auto hosts =
              accepted<hvd::UsageError>([&] { return l::hosts_from_lsb_mcpu(text); })) {
        HVD_FUZZ_CHECK(!hosts->empty());
        check_hosts(*hosts);
      }
      break;
    default:
      choose(text);
      break;
  }
  return 0;
}
