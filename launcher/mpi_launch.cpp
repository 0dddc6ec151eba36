#include "launcher/mpi_launch.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <regex>

#include "common/error.h"
#include "launcher/child_process.h"
#include "launcher/mpi_command.h"
#include "launcher/output_router.h"
#include "ssh/check.h"

extern char** environ;

namespace hvd::launcher {
namespace {

std::string run_capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  ::pclose(pipe);
  return out;
}

// mpirun's environment: ours, with every forwarded variable set to its planned value (`-x NAME`
// then passes it on by name: values never reach a command line).
std::vector<std::string> mpirun_environment(const Plan& plan) {
  std::vector<std::string> env;
  std::vector<std::string> names = forwarded_names(plan);
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const std::string name(entry.substr(0, entry.find('=')));
    if (std::find(names.begin(), names.end(), name) == names.end()) env.emplace_back(entry);
  }
  if (!plan.ranks.empty()) {
    for (const EnvEntry& e : plan.ranks.front().env) {
      if (std::find(names.begin(), names.end(), e.name) != names.end()) {
        env.push_back(e.name + "=" + e.value);
      }
    }
  }
  return env;
}

// Splits a byte stream into lines (a last partial line is kept for later).
class LineSplitter {
 public:
  template <typename Fn>
  void feed(std::string_view bytes, Fn&& on_line) {
    partial_.append(bytes);
    size_t start = 0, nl = 0;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      on_line(std::string_view(partial_).substr(start, nl - start));
      start = nl + 1;
    }
    partial_.erase(0, start);
  }
  template <typename Fn>
  void finish(Fn&& on_line) {
    if (!partial_.empty()) on_line(std::string_view(partial_));
    partial_.clear();
  }

 private:
  std::string partial_;
};

LaunchResult run_mpirun_process(const Plan& plan, const std::vector<std::string>& argv,
                                const std::vector<std::string>& env,
                                const MpiLaunchOptions& options, LaunchResult result) {
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, &old_mask);
  UniqueFd signal_fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));

  // mpirun has no agent's dead-man switch: if hvdrun dies, even by SIGKILL, mpirun gets SIGTERM
  // and takes its daemons and ranks down with it.
  ChildProcess child = spawn_child(argv, env, /*stdin_pipe=*/false, SIGTERM);
  if (child.error != 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    throw UsageError(
        fmt::format("--mpi: cannot start {}: {}", argv.front(), std::strerror(child.error)),
        "install Open MPI 4 (Debian: openmpi-bin)");
  }
  const pid_t pid = child.pid;
  UniqueFd out_r = std::move(child.stdout_r), err_r = std::move(child.stderr_r);

  OutputRouter router(STDOUT_FILENO, STDERR_FILENO, options.output_dir);
  std::string mpirun_text;  // mpirun's own (untagged) lines, for the failure report
  LineSplitter out_lines, err_lines;
  auto on_line = [&](std::string_view line) {
    if (auto tagged = parse_tagged_line(line)) {
      router.write(tagged->rank,
                   tagged->is_stderr ? worker::Stream::kStderr : worker::Stream::kStdout,
                   tagged->text + "\n");
    } else {
      mpirun_text.append(line);
      mpirun_text += '\n';
      spdlog::warn("mpirun: {}", line);
    }
  };
  int status = 0;
  bool exited = false;
  while (!exited || out_r.valid() || err_r.valid() || router.pending(STDOUT_FILENO) ||
         router.pending(STDERR_FILENO)) {
    std::array<pollfd, 5> fds{{{signal_fd.get(), POLLIN, 0},
                               {out_r.valid() ? out_r.get() : -1, POLLIN, 0},
                               {err_r.valid() ? err_r.get() : -1, POLLIN, 0},
                               {router.pending(STDOUT_FILENO) ? STDOUT_FILENO : -1, POLLOUT, 0},
                               {router.pending(STDERR_FILENO) ? STDERR_FILENO : -1, POLLOUT, 0}}};
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      while (::read(signal_fd.get(), &info, sizeof info) == sizeof info) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) {
          if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
        } else if (result.interrupted_by == 0) {
          result.interrupted_by = sig;
          spdlog::warn("{}: stopping mpirun and its ranks (again to kill it at once)",
                       strsignal(sig));
          ::kill(pid, SIGTERM);
        } else {
          ::kill(pid, SIGKILL);
        }
      }
    }
    for (int i : {1, 2}) {
      if (fds[i].revents == 0) continue;
      UniqueFd& fd = i == 1 ? out_r : err_r;
      LineSplitter& lines = i == 1 ? out_lines : err_lines;
      std::array<char, 64 * 1024> buf{};
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n <= 0) {
        lines.finish(on_line);
        fd.reset();
      } else {
        lines.feed(std::string_view(buf.data(), static_cast<size_t>(n)), on_line);
      }
    }
    for (int i : {3, 4}) {
      if (fds[i].revents != 0) router.drain(fds[i].fd);
    }
    if (exited && result.interrupted_by != 0 && !out_r.valid() && !err_r.valid()) break;
  }
  if (!exited) ::waitpid(pid, &status, 0);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  result.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  if (result.interrupted_by != 0 && result.exit_code == 0)
    result.exit_code = 128 + result.interrupted_by;
  for (int r = 0; r < static_cast<int>(plan.ranks.size()); ++r) {
    RankOutcome o;
    o.rank = r;
    o.host_index = plan.ranks[r].host_index;
    o.local_rank = plan.ranks[r].topology.local_rank;
    o.started = true;
    o.last_stderr = router.last_stderr(r);
    result.ranks.push_back(std::move(o));
  }
  if (result.exit_code != 0 && result.interrupted_by == 0) {
    if (auto rank = failed_rank_from_mpirun(mpirun_text);
        rank && *rank < static_cast<int>(result.ranks.size())) {
      RankOutcome& o = result.ranks[*rank];
      o.exited = true;
      o.value = result.exit_code;
      result.first_failure = *rank;
    } else {
      result.error = fmt::format("mpirun exited with code {}", result.exit_code);
      result.error_hint = "mpirun's messages above say why";
    }
  }
  return result;
}

}  // namespace

std::optional<TaggedLine> parse_tagged_line(std::string_view line) {
  static const std::regex kTag(R"(^\[[0-9]+,([0-9]+)\]<(stdout|stderr)>:)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, kTag)) return std::nullopt;
  return TaggedLine{std::stoi(m[1].str()), m[2].str() == "stderr",
                    std::string(line.substr(static_cast<size_t>(m.length(0))))};
}

std::optional<int> failed_rank_from_mpirun(std::string_view text) {
  static const std::regex kProcess(R"(Process name:\s*\[\[[0-9]+,[0-9]+\],([0-9]+)\])");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(text.begin(), text.end(), m, kProcess)) return std::nullopt;
  return std::stoi(m[1].str());
}

namespace {
bool knows_every_host(const Plan& plan, const std::vector<HostFacts>& known) {
  if (known.size() != plan.hosts.size()) return false;
  for (size_t h = 0; h < plan.hosts.size(); ++h) {
    if (!plan.hosts[h].local && known[h].address.empty()) return false;
  }
  return true;
}
}  // namespace

LaunchResult run_mpi(const Plan& plan, const MpiLaunchOptions& options) {
  LaunchResult result;
  result.via_mpirun = true;
  const std::string version_text = run_capture(options.mpirun + " --version 2>&1");
  if (version_text.empty()) {
    throw UsageError(fmt::format("--mpi: cannot run '{} --version'", options.mpirun),
                     "install Open MPI 4 (Debian: openmpi-bin), or use native mode");
  }
  parse_mpirun_version(version_text);

  MpiCommandInput input;
  input.mpirun = options.mpirun;
  input.as_root = ::geteuid() == 0;
  input.ssh = options.ssh;
  input.cwd = options.cwd;
  input.extra_args = options.extra_args;
  std::vector<std::string> boot_ids;
  if (knows_every_host(plan, options.known_hosts)) {
    // The network check's agents logged in over the same SSH settings a moment ago.
    for (size_t h = 0; h < plan.hosts.size(); ++h) {
      if (plan.hosts[h].local) continue;
      input.host_addresses.push_back(options.known_hosts[h].address);
      // An agent that could not read its boot id says "": that is not a shared machine.
      if (!options.known_hosts[h].boot_id.empty())
        boot_ids.push_back(options.known_hosts[h].boot_id);
    }
  } else {
    // The same SSH check as --check-ssh, for every remote host, before anything starts.
    std::vector<ssh::SshTarget> targets;
    for (const HostPlan& h : plan.hosts) {
      if (!h.local) targets.push_back({h.spec.host, h.spec.port, h.spec.user});
    }
    for (ssh::ProbeResult& r : ssh::check_hosts(targets, options.ssh)) {
      if (!r.ok()) {
        result.ssh_failures.push_back(std::move(r));
        continue;
      }
      input.host_addresses.push_back(r.address);
      if (r.remote) boot_ids.push_back(r.remote->boot_id);
    }
    if (!result.ssh_failures.empty()) {
      result.exit_code = to_int(ExitCode::kSshCheckFailed);
      return result;
    }
  }
  if (std::any_of(plan.hosts.begin(), plan.hosts.end(),
                  [](const HostPlan& h) { return h.local; })) {
    input.host_addresses.emplace_back("127.0.0.1");
  }
  std::sort(boot_ids.begin(), boot_ids.end());
  input.same_machine = std::adjacent_find(boot_ids.begin(), boot_ids.end()) != boot_ids.end();
  if (input.same_machine) {
    spdlog::info(
        "some hosts are the same machine (one boot id): adding -mca btl ^vader, as "
        "Open MPI's shared-memory transport crashes across such hosts");
  }
  const std::vector<std::string> argv = mpirun_argv(plan, input);
  spdlog::debug("mpirun command: {}", fmt::join(argv, " "));
  return run_mpirun_process(plan, argv, mpirun_environment(plan), options, std::move(result));
}

}  // namespace hvd::launcher
