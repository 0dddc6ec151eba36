#include "launcher/plan/scheduler_hosts.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/plural.h"

namespace hvd::launcher {
namespace {

// More names than this from one variable is a typo (n[1-1000000]), not a cluster.
constexpr std::size_t kMaxExpandedHosts = 100000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<long> to_number(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  long value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

[[noreturn]] void bad_hostlist(std::string_view what, std::string_view text, std::string_view part,
                               std::string_view why) {
  throw UsageError(fmt::format("{}='{}': {} in '{}'", what, text, why, part),
                   "Slurm's host list is name[01-04,07],other: give -H or --hostfile to name "
                   "the hosts yourself");
}

// The numbers of one bracket group "01-04,07" as strings, padded like their lower bounds.
std::vector<std::string> expand_group(std::string_view group, std::string_view what,
                                      std::string_view text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= group.size()) {
    const std::size_t comma = std::min(group.find(',', at), group.size());
    const std::string_view item = group.substr(at, comma - at);
    at = comma + 1;
    const std::size_t dash = item.find('-');
    const std::string_view lo_text = item.substr(0, dash);
    const std::string_view hi_text =
        dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    const auto lo = to_number(lo_text);
    const auto hi = to_number(hi_text);
    if (!lo || !hi) bad_hostlist(what, text, item, "not a number or a range of numbers");
    if (*lo > *hi) bad_hostlist(what, text, item, "a range that goes down");
    if (out.size() + static_cast<std::size_t>(*hi - *lo) + 1 > kMaxExpandedHosts) {
      bad_hostlist(what, text, item, fmt::format("more than {} hosts", kMaxExpandedHosts));
    }
    for (long n = *lo; n <= *hi; ++n) {
      out.push_back(fmt::format("{:0{}}", n, lo_text.size()));
    }
    if (comma == group.size()) break;
  }
  return out;
}

// One entry, "rack[1-2]-n[01-02]": the product of its bracket groups, in order.
void expand_entry(std::string_view entry, std::string_view what, std::string_view text,
                  std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  std::size_t at = 0;
  while (at < entry.size()) {
    const std::size_t open = entry.find('[', at);
    const std::string_view literal =
        entry.substr(at, open == std::string_view::npos ? entry.npos : open - at);
    if (literal.find(']') != std::string_view::npos)
      bad_hostlist(what, text, entry, "a ']' without '['");
    for (std::string& n : names) n += literal;
    if (open == std::string_view::npos) break;
    const std::size_t close = entry.find(']', open);
    if (close == std::string_view::npos) bad_hostlist(what, text, entry, "a '[' without ']'");
    const std::string_view group = entry.substr(open + 1, close - open - 1);
    if (group.find('[') != std::string_view::npos) bad_hostlist(what, text, entry, "nested '['");
    const std::vector<std::string> numbers = expand_group(group, what, text);
    if (names.size() * numbers.size() > kMaxExpandedHosts) {
      bad_hostlist(what, text, entry, fmt::format("more than {} hosts", kMaxExpandedHosts));
    }
    std::vector<std::string> next;
    next.reserve(names.size() * numbers.size());
    for (const std::string& n : names) {
      for (const std::string& number : numbers) next.push_back(n + number);
    }
    names = std::move(next);
    at = close + 1;
  }
  for (std::string& n : names) {
    if (n.empty()) bad_hostlist(what, text, entry, "an empty host name");
    out.push_back(std::move(n));
    if (out.size() > kMaxExpandedHosts) {
      bad_hostlist(what, text, entry, fmt::format("more than {} hosts", kMaxExpandedHosts));
    }
  }
}

std::vector<HostSpec> specs(const std::vector<std::string>& names, const std::vector<int>& slots,
                            std::string_view origin) {
  std::vector<HostSpec> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    HostSpec h;
    h.host = names[i];
    h.slots = slots[i];
    h.origin = fmt::format("{} entry {}", origin, i + 1);
    out.push_back(std::move(h));
  }
  return out;
}

int total_slots(const std::vector<HostSpec>& hosts) {
  int n = 0;
  for (const HostSpec& h : hosts) n += h.slots;
  return n;
}

HostsSource from_slurm(const EnvLookup& env, const std::string& job) {
  const auto list = env("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST") : env("SLURM_NODELIST");
  if (!list || trim(*list).empty()) {
    throw UsageError(
        fmt::format("SLURM_JOB_ID={} is set, but SLURM_JOB_NODELIST is not: hvdrun cannot tell "
                    "which nodes the allocation has",
                    job),
        "run hvdrun inside the allocation (salloc, sbatch), or name the hosts with -H or "
        "--hostfile");
  }
  const std::vector<std::string> names = expand_slurm_hostlist(*list, "SLURM_JOB_NODELIST");
  std::vector<int> slots(names.size(), 1);
  if (const auto counts = env("SLURM_TASKS_PER_NODE")) {
    slots = expand_slurm_counts(*counts, names.size(), "SLURM_TASKS_PER_NODE");
  }
  HostsSource source;
  source.kind = "slurm";
  source.hosts = specs(names, slots, "SLURM_JOB_NODELIST");
  source.slurm_job = job;
  const auto ntasks = env("SLURM_NTASKS") ? env("SLURM_NTASKS") : env("SLURM_NPROCS");
  if (ntasks) {
    const auto n = to_number(trim(*ntasks));
    if (!n || *n < 1) {
      throw UsageError(fmt::format("SLURM_NTASKS='{}' is not a positive number", *ntasks),
                       "give -np yourself, or run hvdrun in an allocation Slurm made");
    }
    source.default_np = static_cast<int>(*n);
  }
  source.description =
      fmt::format("the Slurm allocation {}: {}, {}", job, plural(names.size(), "node"),
                  plural(static_cast<std::size_t>(total_slots(source.hosts)), "task"));
  return source;
}

std::optional<std::string> read_listed_file(const std::string& variable, const std::string& path,
                                            const FileLookup& read_file) {
  auto text = read_file(path);
  if (!text) {
    throw UsageError(fmt::format("{}={}: no such readable file", variable, path),
                     "the scheduler's file is gone: name the hosts with -H or --hostfile, or "
                     "unset the variable");
  }
  return text;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view text, std::string_view what) {
  const std::string_view list = trim(text);
  if (list.empty()) bad_hostlist(what, text, text, "no host");
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || (depth > 0 && i < list.size())) continue;
    const std::string_view entry = trim(list.substr(start, i - start));
    if (entry.empty()) bad_hostlist(what, text, list, "an empty entry");
    expand_entry(entry, what, text, out);
    start = i + 1;
  }
  return out;
}

std::vector<int> expand_slurm_counts(std::string_view text, std::size_t nodes,
                                     std::string_view what) {
  auto bad = [&](std::string_view part, std::string_view why) -> UsageError {
    return UsageError(fmt::format("{}='{}': {} in '{}'", what, text, why, part),
                      "Slurm writes per-node counts as 2(x3),1; give -H or --hostfile to set "
                      "the slots yourself");
  };
  std::vector<int> out;
  const std::string_view list = trim(text);
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view item = trim(list.substr(at, comma - at));
    at = comma + 1;
    const std::size_t paren = item.find('(');
    const auto count = to_number(item.substr(0, paren));
    if (!count || *count < 1 || *count > kMaxSlotsPerHost) {
      throw bad(item, fmt::format("not a count from 1 to {}", kMaxSlotsPerHost));
    }
    long repeat = 1;
    if (paren != std::string_view::npos) {
      const std::string_view rest = item.substr(paren);
      const auto times = rest.size() > 3 && rest.substr(0, 2) == "(x" && rest.back() == ')'
                             ? to_number(rest.substr(2, rest.size() - 3))
                             : std::nullopt;
      if (!times || *times < 1) throw bad(item, "a repeat that is not (xN)");
      repeat = *times;
    }
    if (out.size() + static_cast<std::size_t>(repeat) > nodes) {
      throw bad(list, fmt::format("counts for more than the {} nodes", nodes));
    }
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(*count));
    if (comma == list.size()) break;
  }
  if (out.size() != nodes) {
    throw bad(list, fmt::format("counts for {} of the {} nodes", out.size(), nodes));
  }
  return out;
}

std::vector<HostSpec> hosts_from_slot_lines(std::string_view text, std::string_view what) {
  std::vector<HostSpec> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const std::string_view name = trim(line);
    if (name.empty()) continue;
    if (name.find_first_of(" \t") != std::string_view::npos) {
      throw UsageError(fmt::format("{}:{}: '{}' is not one host name", what, number, name),
                       "the scheduler's node file has one host name per line and slot");
    }
    auto it =
        std::find_if(out.begin(), out.end(), [&](const HostSpec& h) { return h.host == name; });
    if (it != out.end()) {
      ++it->slots;
      continue;
    }
    HostSpec h;
    h.host = std::string(name);
    h.origin = fmt::format("{}:{}", what, number);
    out.push_back(std::move(h));
  }
  if (out.empty()) {
    throw UsageError(fmt::format("{}: no host in it", what),
                     "name the hosts with -H or --hostfile");
  }
  return out;
}

std::vector<HostSpec> hosts_from_lsb_mcpu(std::string_view text) {
  std::istringstream words{std::string(text)};
  std::vector<std::string> w;
  for (std::string s; words >> s;) w.push_back(s);
  if (w.empty() || w.size() % 2 != 0) {
    throw UsageError(fmt::format("LSB_MCPU_HOSTS='{}': not pairs of host and slot count", text),
                     "LSF writes it as 'host1 4 host2 4'; name the hosts with -H instead");
  }
  std::vector<HostSpec> out;
  for (std::size_t i = 0; i < w.size(); i += 2) {
    const auto n = to_number(w[i + 1]);
    if (!n || *n < 1 || *n > kMaxSlotsPerHost) {
      throw UsageError(
          fmt::format("LSB_MCPU_HOSTS='{}': '{}' is not a slot count for {}", text, w[i + 1], w[i]),
          "LSF writes it as 'host1 4 host2 4'; name the hosts with -H instead");
    }
    HostSpec h;
    h.host = w[i];
    h.slots = static_cast<int>(*n);
    h.origin = fmt::format("LSB_MCPU_HOSTS entry {}", i / 2 + 1);
    out.push_back(std::move(h));
  }
  return out;
}

namespace {

// A scheduler's names reach ssh's and mpirun's command lines as -H entries do: the same checks,
// the message naming where the name came from (`variable`, and the entry or file line).
void validate_scheduler_hosts(const HostsSource& source, std::string_view variable) {
  for (const HostSpec& h : source.hosts) {
    const bool named = h.origin.find(variable) != std::string::npos;
    validate_listed_host(h.host, named ? h.origin : fmt::format("{} ({})", h.origin, variable));
  }
}

HostsSource choose_scheduler_hosts(const EnvLookup& env, const FileLookup& read_file);

}  // namespace

HostsSource choose_hosts(const std::optional<std::string>& host_list,
                         const std::optional<std::string>& hostfile, const EnvLookup& getenv,
                         const FileLookup& read_file) {
  // A variable set to "" is not set (a job script's `export SLURM_JOB_ID=`).
  const EnvLookup env = [&getenv](const std::string& name) -> std::optional<std::string> {
    auto v = getenv(name);
    if (v && trim(*v).empty()) return std::nullopt;
    return v;
  };
  HostsSource source;
  if (host_list) {
    source.kind = "host_list";
    source.hosts = parse_host_list(*host_list);
    source.description = "-H";
  } else if (hostfile) {
    source.kind = "hostfile";
    source.hosts = read_hostfile(*hostfile);
    source.description = "--hostfile " + *hostfile;
  } else {
    return choose_scheduler_hosts(env, read_file);
  }
  return source;
}

namespace {

HostsSource choose_scheduler_hosts(const EnvLookup& env, const FileLookup& read_file) {
  HostsSource source;
  if (const auto job = env("SLURM_JOB_ID")) {
    source = from_slurm(env, *job);
    validate_scheduler_hosts(source, "SLURM_JOB_NODELIST");
  } else if (const auto nodefile = env("PBS_NODEFILE")) {
    const auto text = read_listed_file("PBS_NODEFILE", *nodefile, read_file);
    source.kind = "pbs";
    source.hosts = hosts_from_slot_lines(*text, *nodefile);
    validate_scheduler_hosts(source, "PBS_NODEFILE");
    source.description =
        fmt::format("the PBS allocation{}: {}, {} (PBS_NODEFILE)",
                    env("PBS_JOBID") ? " " + *env("PBS_JOBID") : std::string(),
                    plural(source.hosts.size(), "node"),
                    plural(static_cast<std::size_t>(total_slots(source.hosts)), "slot"));
  } else if (env("LSB_MCPU_HOSTS") || env("LSB_DJOB_HOSTFILE")) {
    source.kind = "lsf";
    const char* from = "LSB_MCPU_HOSTS";
    if (const auto mcpu = env("LSB_MCPU_HOSTS")) {
      source.hosts = hosts_from_lsb_mcpu(*mcpu);
    } else {
      const std::string path = *env("LSB_DJOB_HOSTFILE");
      source.hosts =
          hosts_from_slot_lines(*read_listed_file("LSB_DJOB_HOSTFILE", path, read_file), path);
      from = "LSB_DJOB_HOSTFILE";
    }
    validate_scheduler_hosts(source, from);
    source.description =
        fmt::format("the LSF allocation{}: {}, {} ({})",
                    env("LSB_JOBID") ? " " + *env("LSB_JOBID") : std::string(),
                    plural(source.hosts.size(), "host"),
                    plural(static_cast<std::size_t>(total_slots(source.hosts)), "slot"), from);
  } else if (const auto path = env("OMPI_MCA_orte_default_hostfile")) {
    source.kind = "openmpi";
    source.hosts = parse_hostfile(
        *read_listed_file("OMPI_MCA_orte_default_hostfile", *path, read_file), *path);
    source.description =
        fmt::format("Open MPI's default hostfile {} (OMPI_MCA_orte_default_hostfile)", *path);
  } else {
    source.kind = "localhost";
    source.description = "localhost (no -H, --hostfile or scheduler allocation)";
  }
  return source;
}

}  // namespace

std::optional<std::string> getenv_value(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace hvd::launcher
