// Shared helpers for the SSH launch tests (test_launch_ssh*.cpp).
#pragma once
#include <sched.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>
#include <set>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"
#include "tests/support/test_hosts.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;
using nlohmann::json;

namespace hvd::test::launch_ssh {

// ---------------------------------------------------------------------------------------------
// The fixture's hosts, with a private known_hosts

class Hosts {
 public:
  Hosts() : hosts_(TestHosts::load()) {
    known_hosts_ = dir_ / "known_hosts";
    write_file(known_hosts_, read_file(hosts_.known_hosts));
  }
  // The fixture's host number `i` (0 = 127.0.0.2). Tests use different hosts where they can.
  const std::string& addr(size_t i) const {
    if (i >= hosts_.addresses.size()) {
      throw std::runtime_error("the sshd fixture has only " +
                               std::to_string(hosts_.addresses.size()) + " hosts");
    }
    return hosts_.addresses[i];
  }
  int port() const { return hosts_.port; }
  // A key the hosts accept with a forced command="exit 7" (tests/sshd/sshd_hosts.sh).
  std::string key_exit7() const { return hosts_.dir + "/id_ed25519_exit7"; }
  // A key whose login prints "Welcome to the cluster!" on stdout before every command.
  std::string key_chatty() const { return hosts_.dir + "/id_ed25519_chatty"; }
  const TempDir& dir() const { return dir_; }
  // hvdrun's SSH options, then `rest`.
  std::vector<std::string> args(const std::vector<std::string>& rest) const {
    std::vector<std::string> out{"-p",
                                 std::to_string(hosts_.port),
                                 "--ssh-config",
                                 hosts_.ssh_config,
                                 "--ssh-known-hosts",
                                 known_hosts_};
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  }

 private:
  TestHosts hosts_;
  TempDir dir_;
  std::string known_hosts_;
};

inline std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 6000) +
         "\n--- stderr ---\n" + r.err.substr(0, 6000);
}

inline json parse_json(const std::string& text) {
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  return doc;
}

// NAME=value lines of `env` output.
inline std::map<std::string, std::string> env_lines(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> env;
  for (const std::string& line : lines) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

inline std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

inline size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

inline bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ---------------------------------------------------------------------------------------------
// Processes: /proc/PID/stat, cmdline, environ

struct ProcStat {
  pid_t pid = -1;
  pid_t ppid = -1;
  char state = '?';
  unsigned long long start = 0;  // start time in clock ticks: tells a reused pid apart
};

inline std::optional<ProcStat> stat_of(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');  // the command name may contain spaces and ')'
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  ProcStat st;
  st.pid = pid;
  std::string field;
  in >> st.state >> st.ppid;
  for (int i = 5; i <= 21 && in >> field; ++i) {
  }
  in >> st.start;
  return st;
}

inline std::vector<std::string> cmdline_of(pid_t pid) {
  const std::string raw = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  size_t at = 0;
  while (at < raw.size()) {
    size_t end = raw.find('\0', at);
    if (end == std::string::npos) end = raw.size();
    args.push_back(raw.substr(at, end - at));
    at = end + 1;
  }
  return args;
}

inline std::string cmdline_text(pid_t pid) {
  std::string out;
  for (const std::string& a : cmdline_of(pid)) out += (out.empty() ? "" : " ") + a;
  return out;
}

inline std::string environ_value(pid_t pid, const std::string& name) {
  const std::string raw = read_file("/proc/" + std::to_string(pid) + "/environ");
  const std::string prefix = name + "=";
  size_t at = 0;
  while (at < raw.size()) {
    size_t end = raw.find('\0', at);
    if (end == std::string::npos) end = raw.size();
    if (raw.compare(at, prefix.size(), prefix) == 0) {
      return raw.substr(at + prefix.size(), end - at - prefix.size());
    }
    at = end + 1;
  }
  return "";
}

// An agent (`AGENT --agent`), not its guard (agent/agent_guard.h: the agent's parent, with the
// same command line and environment, named hvdrun-guard).
inline bool is_guard(pid_t pid) { return comm_of(pid) == "hvdrun-guard"; }

inline bool is_agent(pid_t pid) {
  const auto args = cmdline_of(pid);
  return args.size() == 2 && args[1] == "--agent" && !is_guard(pid);
}

// An sshd session process (`sshd: USER@notty`), never the listener.
inline bool is_sshd_session(pid_t pid) {
  const std::string text = cmdline_text(pid);
  return text.rfind("sshd: ", 0) == 0 && text.find("@notty") != std::string::npos &&
         text.find("listener") == std::string::npos;
}

// The same process (not a reused pid), still running (a zombie has finished).
inline bool still_running(const ProcStat& was) {
  const auto now = stat_of(was.pid);
  return now && now->start == was.start && now->state != 'Z';
}

// A remote host's side of a job: its agent, the agent's guard and the sshd session that runs
// them.
struct RemoteSide {
  ProcStat agent;
  ProcStat guard;
  ProcStat session;
  std::string server;  // SSH_CONNECTION's server address: the host as the agent was reached
  std::string client;  // SSH_CONNECTION's client address: the launcher as that host sees it
};

// The remote sides of the job, found from its ranks: a rank's parent is its agent (also for
// descendants, which the agent reaps as a subreaper), the agent's parent is its guard, the
// guard's parent its sshd session.
inline std::vector<RemoteSide> remote_sides(const JobMarker& marker) {
  std::vector<RemoteSide> out;
  std::set<pid_t> seen;
  for (pid_t pid : marker.ranks()) {
    auto st = stat_of(pid);
    for (int up = 0; st && up < 4 && !is_agent(st->pid); ++up) st = stat_of(st->ppid);
    if (!st || !is_agent(st->pid) || !seen.insert(st->pid).second) continue;
    const std::vector<std::string> conn = words(environ_value(st->pid, "SSH_CONNECTION"));
    if (conn.size() != 4) continue;  // a local agent
    RemoteSide side;
    side.agent = *st;
    side.client = conn[0];
    side.server = conn[2];
    auto parent = stat_of(st->ppid);
    if (parent && is_guard(parent->pid)) {
      side.guard = *parent;
      parent = stat_of(parent->ppid);
    }
    if (parent && is_sshd_session(parent->pid)) side.session = *parent;
    out.push_back(side);
  }
  return out;
}

// What is still running of the job: its marked processes, and the agents and sshd sessions seen
// while it ran. One line per process, empty when nothing is left.
inline std::string leftovers(const JobMarker& marker, const std::vector<RemoteSide>& sides) {
  std::string out;
  for (pid_t pid : marker.alive()) {
    const auto st = stat_of(pid);
    if (st && st->state == 'Z') continue;
    out += std::to_string(pid) + " " + cmdline_text(pid) + "\n";
  }
  for (const RemoteSide& side : sides) {
    for (const ProcStat* p : {&side.agent, &side.guard, &side.session}) {
      if (p->pid > 0 && still_running(*p)) {
        out += std::to_string(p->pid) + " " + cmdline_text(p->pid) + " (on " + side.server + ")\n";
      }
    }
  }
  return out;
}

// The rank-environment check shared by the all-remote layouts.
struct Expected {
  std::string host;
  int local_rank, local_size, cross_rank, cross_size, group_rank;
};

inline void check_rank_environment(const Hosts& hosts, const std::string& host_list,
                                   const std::vector<Expected>& want) {
  JobMarker marker;
  const int np = static_cast<int>(want.size());
  const RunResult r = run_hvdrun(hosts.args({"-H", host_list, "--json", "--grace", "1", "-x",
                                             marker.forward(), "sh", "-c", "env; echo done"}),
                                 {marker.env()});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // --json: the result alone on stdout, the ranks' tagged output on stderr.
  const json doc = parse_json(r.out);
  const TaggedLines out = split_tagged(r.err, "stdout");
  for (const std::string& line : out.other) {
    INFO("an untagged line on stderr");
    CHECK_THAT(line, Catch::Matchers::StartsWith("hvdrun: "));
  }
  REQUIRE(static_cast<int>(out.by_rank.size()) == np);
  const auto env0 = env_lines(out.by_rank.at(0));
  for (int rank = 0; rank < np; ++rank) {
    INFO("rank " << rank << " on " << want[rank].host);
    const std::vector<std::string>& lines = out.by_rank.at(rank);
    CHECK(lines.back() == "done");
    const auto env = env_lines(lines);
    const std::string R = std::to_string(rank);
    const std::string N = std::to_string(np);
    const Expected& e = want[rank];
    const std::map<std::string, std::string> expect{
        {"HOROVOD_RANK", R},
        {"HOROVOD_SIZE", N},
        {"HOROVOD_LOCAL_RANK", std::to_string(e.local_rank)},
        {"HOROVOD_LOCAL_SIZE", std::to_string(e.local_size)},
        {"HOROVOD_CROSS_RANK", std::to_string(e.cross_rank)},
        {"HOROVOD_CROSS_SIZE", std::to_string(e.cross_size)},
        {"HOROVOD_HOSTNAME", e.host},
        {"RANK", R},
        {"WORLD_SIZE", N},
        {"LOCAL_RANK", std::to_string(e.local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(e.local_size)},
        {"GROUP_RANK", std::to_string(e.group_rank)},
        {"MASTER_ADDR", want[0].host},   // rank 0's host, as every host reaches it
        {"HVD_ADVERTISE_ADDR", e.host},  // this rank's own host
        {"HVDTEST_RANK_MARKER", marker.value()}};
    for (const auto& [name, value] : expect) {
      INFO(name);
      CHECK(env.count(name) == 1);
      if (env.count(name) == 1) CHECK(env.at(name) == value);
    }
    REQUIRE(env.count("MASTER_PORT") == 1);
    CHECK(all_digits(env.at("MASTER_PORT")));
    if (all_digits(env.at("MASTER_PORT"))) {
      CHECK(std::stol(env.at("MASTER_PORT")) > 0);
      CHECK(std::stol(env.at("MASTER_PORT")) < 65536);
    }
    CHECK(env.at("MASTER_PORT") == env0.at("MASTER_PORT"));
    REQUIRE(env.count("HVD_JOB_ID") == 1);
    CHECK(env.at("HVD_JOB_ID") == env0.at("HVD_JOB_ID"));
    // The rank really runs behind an SSH login to its own host, on the fixture's port.
    REQUIRE(env.count("SSH_CONNECTION") == 1);
    const std::vector<std::string> conn = words(env.at("SSH_CONNECTION"));
    REQUIRE(conn.size() == 4);
    CHECK(conn[2] == e.host);
    CHECK(conn[3] == std::to_string(hosts.port()));
  }

  CHECK(doc["schema_version"] == 1);
  CHECK(doc["ok"] == true);
  CHECK(doc["exit_code"] == 0);
  CHECK(doc["np"] == np);
  CHECK(doc["first_failure"].is_null());
  CHECK(doc["error"].is_null());
  CHECK(doc["interrupted_by"].is_null());
  REQUIRE(doc["ranks"].size() == want.size());
  for (int rank = 0; rank < np; ++rank) {
    INFO("rank " << rank);
    const json& jr = doc["ranks"][rank];
    CHECK(jr["rank"] == rank);
    CHECK(jr["host"] == want[rank].host);
    CHECK(jr["local_rank"] == want[rank].local_rank);
    CHECK(jr["exit_code"] == 0);
    CHECK(jr["signal"].is_null());
    CHECK(jr["stopped_by_hvdrun"] == false);
    CHECK(jr["pid"].is_number_integer());
  }
  CHECK(wait_until([&] { return marker.alive().empty(); }, 3s));
}

}  // namespace hvd::test::launch_ssh
