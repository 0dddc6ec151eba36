#include "launcher/mpirun/mpi_launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fd_io.h"
#include "common/process.h"
#include "common/tcp_listen.h"
#include "launcher/core/supervisor.h"
#include "launcher/mpirun/mpi_command.h"
#include "launcher/native/agent_launch.h"
#include "launcher/native/native_launcher.h"
#include "launcher/native/rsh_launch.h"
#include "ssh/check.h"

extern char** environ;

namespace hvd::launcher {
namespace {

bool has_remote_host(const Plan& plan) {
  return std::any_of(plan.hosts.begin(), plan.hosts.end(),
                     [](const HostPlan& h) { return !h.local; });
}

// mpirun's environment: ours, with every forwarded variable set to its planned value (`-x NAME`
// then passes it on by name: values never reach a command line).
std::vector<std::string> mpirun_environment(const Plan& plan, const MpiCommandInput& input) {
  std::vector<std::string> env;
  const std::vector<std::string> names = forwarded_names(plan);
  std::vector<std::string> replaced = names;
  for (const auto& [name, value] : input.shim_env) replaced.push_back(name);
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const std::string name(entry.substr(0, entry.find('=')));
    if (std::find(replaced.begin(), replaced.end(), name) == replaced.end()) {
      env.emplace_back(entry);
    }
  }
  if (!plan.ranks.empty()) {
    for (const EnvEntry& e : plan.ranks.front().env) {
      if (std::find(names.begin(), names.end(), e.name) != names.end()) {
        env.push_back(e.name + "=" + e.value);
      }
    }
  }
  for (const auto& [name, value] : input.shim_env) env.push_back(name + "=" + value);
  if (input.rsh_agent) env.push_back(std::string(kRshAgentTemplateVar) + "=" + *input.rsh_agent);
  return env;
}

// The children of `pid`, from /proc/PID/task/*/children (empty where the kernel has no such file).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(task.path() / "children");
    for (long child = 0; in >> child;) out.push_back(static_cast<pid_t>(child));
  }
  return out;
}

// After a hung mpirun was killed: the job's Open MPI daemons still running on this machine (a
// daemon deadlocked in its teardown stays for good). Found by the TMPDIR the daemon shim gave each
// of them, under `base` (exec_orted_shim): this job's only. Daemons on other machines are out of
// reach: the report says to look for them.
void kill_daemons_here(const std::string& base) {
  const std::string mark = "TMPDIR=" + base + "/";
  std::error_code ec;
  int killed = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string var;
    while (std::getline(in, var, '\0')) {
      if (var.rfind(mark, 0) != 0) continue;
      if (::kill(static_cast<pid_t>(std::stol(name)), SIGKILL) == 0) ++killed;
      break;
    }
  }
  if (killed > 0) {
    spdlog::warn("killed {} Open MPI daemon process{} of this job left on this machine", killed,
                 killed == 1 ? "" : "es");
  }
}

// mpirun as the supervisor's job: its two pipes, its exit, and how to stop it (signals to mpirun
// itself, which stops its daemons and ranks).
class MpirunJob final : public Job {
 public:
  MpirunJob(Supervisor& supervisor, Process mpirun, int ranks, std::chrono::milliseconds grace,
            TagEnd tag_end)
      : sup_(supervisor),
        mpirun_(std::move(mpirun)),
        ranks_(ranks),
        grace_(grace),
        out_([this](int r, bool e, std::string_view b) { rank_bytes(r, e, b); },
             [this](std::string_view line, bool from_mpirun) { own_line(line, from_mpirun); },
             ranks, tag_end),
        err_([this](int r, bool e, std::string_view b) { rank_bytes(r, e, b); },
             [this](std::string_view line, bool from_mpirun) { own_line(line, from_mpirun); },
             ranks, tag_end) {}

  void add_pollfds(std::vector<pollfd>& fds, bool read_output) override {
    for (UniqueFd* fd : {&mpirun_.out(), &mpirun_.err()}) {
      fds.push_back({fd->valid() && read_output ? fd->get() : -1, POLLIN, 0});
    }
  }
  void on_ready(std::span<const pollfd> fds) override {
    for (int i : {0, 1}) {
      if (fds[static_cast<size_t>(i)].revents == 0) continue;
      UniqueFd& fd = i == 0 ? mpirun_.out() : mpirun_.err();
      TagSplitter& splitter = i == 0 ? out_ : err_;
      std::array<char, 64 * 1024> buf{};
      const long n = read_some(fd.get(), buf.data(), buf.size());
      if (n <= 0) {
        splitter.finish();
        fd.reset();
      } else {
        splitter.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
      }
    }
  }
  void on_child_exited() override { mpirun_.try_reap(); }
  void stop(StopMode mode) override {
    if (mpirun_.running()) ::kill(mpirun_.pid(), mode == StopMode::kKill ? SIGKILL : SIGTERM);
  }
  // mpirun passes SIGUSR1 and SIGUSR2 on to every rank by itself (through its daemons).
  bool forwards_signals() const override { return true; }
  void forward_signal(int sig) override {
    if (mpirun_.running()) ::kill(mpirun_.pid(), sig);
  }
  bool done() const override {
    return mpirun_.status() && !mpirun_.out().valid() && !mpirun_.err().valid();
  }
  // mpirun did not end in time (stopped, or waiting on a daemon it cannot reach): killed, its
  // daemons stop their ranks when it is gone (Open MPI's own lifeline), and hvdrun moves on.
  std::vector<std::string> abandon() override {
    mpirun_.signal_group(SIGKILL);
    mpirun_.wait();
    mpirun_.out().reset();
    mpirun_.err().reset();
    return {"mpirun (this machine)"};
  }

  // Once mpirun has said it aborts the job (a rank failed), it has the grace period and the stop
  // margin to end, as a stop hvdrun asks for would. Open MPI 4's daemons can hang in their own
  // teardown (PMIx_server_finalize, seen after a rank died during MPI_Init: tests/chaos), and
  // mpirun waits for them for good: then it is killed, and hvdrun says so.
  std::optional<Clock::time_point> deadline() const override {
    if (!aborted_at_ || hung_ || done()) return std::nullopt;
    return *aborted_at_ + grace_ + kStopMargin;
  }
  void on_deadline() override {
    if (const auto due = deadline(); !due || Clock::now() < *due) return;
    hung_ = true;
    spdlog::warn(
        "mpirun aborted the job {:.0f} s ago and has not ended: Open MPI's daemons hang in their "
        "teardown; killing mpirun",
        std::chrono::duration<double>(Clock::now() - *aborted_at_).count());
    // Its ssh clients to the daemons' hosts run in process groups of their own: they go too
    // (the hung daemon itself is detached from them: kill_daemons_here after the run).
    const std::vector<pid_t> children = children_of(mpirun_.pid());
    mpirun_.signal_group(SIGKILL);
    for (const pid_t child : children) {
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
    }
    mpirun_.wait();
    // What the killed group had written is still in the pipes: the console gets it.
    for (int i : {0, 1}) {
      UniqueFd& fd = i == 0 ? mpirun_.out() : mpirun_.err();
      TagSplitter& splitter = i == 0 ? out_ : err_;
      if (!fd.valid()) continue;
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
      std::array<char, 64 * 1024> buf{};
      for (long n = 0; (n = read_some(fd.get(), buf.data(), buf.size())) > 0;) {
        splitter.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
      }
      splitter.finish();
      fd.reset();
    }
  }

  ExitStatus status() const { return mpirun_.status().value_or(ExitStatus{false, 127}); }
  const std::string& own_text() const { return mpirun_text_; }
  // mpirun was killed by on_deadline(): its exit status is hvdrun's SIGKILL, not the job's.
  bool hung() const { return hung_; }

 private:
  void rank_bytes(int rank, bool is_stderr, std::string_view bytes) {
    if (rank < 0 || rank >= ranks_) {  // not one of ours (the splitter sends none): show it
      own_line(bytes, false);
      return;
    }
    sup_.output().write(rank, is_stderr ? agent::Stream::kStderr : agent::Stream::kStdout, bytes);
  }
  // `from_mpirun`: false for a line that starts with a tag of no rank of the job, which only a
  // rank's text can be: shown, never read (a rank must not steer hvdrun by what it prints).
  void own_line(std::string_view line, bool from_mpirun) {
    if (!from_mpirun) {
      spdlog::warn("mpirun passed on a line tagged for no rank of this job: {}", line);
      return;
    }
    // Kept for the failure report (which rank failed first), bounded.
    if (mpirun_text_.size() < kMaxOwnText) mpirun_text_.append(line).append("\n");
    spdlog::warn("mpirun: {}", line);
    if (!aborted_at_ && mpirun_aborts_job(line)) aborted_at_ = Clock::now();
  }

  static constexpr size_t kMaxOwnText = 1 << 20;
  Supervisor& sup_;
  Process mpirun_;
  int ranks_;
  std::chrono::milliseconds grace_;
  std::optional<Clock::time_point> aborted_at_;  // when mpirun said it aborts the job
  bool hung_ = false;
  std::string mpirun_text_;  // mpirun's own (untagged) lines, for the failure report
  TagSplitter out_, err_;
};

// This machine's boot id ("" where it cannot be read), to compare with the hosts'.
std::string own_boot_id_text() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

bool knows_every_host(const Plan& plan, const std::vector<HostFacts>& known) {
  if (known.size() != plan.hosts.size()) return false;
  for (size_t h = 0; h < plan.hosts.size(); ++h) {
    if (!plan.hosts[h].local && known[h].address.empty()) return false;
  }
  return true;
}

// The hosts' addresses and boot ids for mpirun's command line: from the network check's agents
// when they told, else from the SSH check (which also fails the launch when a host fails it).
bool learn_hosts(const Plan& plan, const LaunchOptions& options,
                 const std::vector<HostFacts>& known, MpiCommandInput& input,
                 LaunchResult& result) {
  std::vector<std::string> boot_ids;
  std::map<std::string, std::set<int>> ranks_by_machine;  // boot id -> each host's rank count
  if (knows_every_host(plan, known)) {
    for (size_t h = 0; h < plan.hosts.size(); ++h) {
      if (plan.hosts[h].local) continue;
      input.host_addresses.push_back(known[h].address);
      // An agent that could not read its boot id says "": that is not a shared machine.
      if (!known[h].boot_id.empty()) {
        boot_ids.push_back(known[h].boot_id);
        ranks_by_machine[known[h].boot_id].insert(plan.hosts[h].num_ranks);
      }
    }
  } else {
    std::vector<ssh::SshTarget> targets;
    std::vector<int> target_ranks;
    for (const HostPlan& h : plan.hosts) {
      if (h.local) continue;
      targets.push_back({h.spec.host, h.spec.port, h.spec.user});
      target_ranks.push_back(h.num_ranks);
    }
    size_t t = 0;
    for (ssh::HostCheck& r : ssh::check_hosts(targets, options.ssh)) {
      const int ranks = target_ranks[t++];
      if (!r.ok()) {
        result.ssh_failures.push_back(std::move(r));
        continue;
      }
      input.host_addresses.push_back(r.address);
      if (r.remote) {
        boot_ids.push_back(r.remote->boot_id);
        ranks_by_machine[r.remote->boot_id].insert(ranks);
      }
    }
    if (!result.ssh_failures.empty()) return false;
  }
  if (std::any_of(plan.hosts.begin(), plan.hosts.end(),
                  [](const HostPlan& h) { return h.local; })) {
    input.host_addresses.emplace_back("127.0.0.1");
  }
  std::sort(boot_ids.begin(), boot_ids.end());
  input.same_machine = std::adjacent_find(boot_ids.begin(), boot_ids.end()) != boot_ids.end();
  for (const auto& [boot_id, counts] : ranks_by_machine) {
    if (input.mpi_major >= 5 && counts.size() > 1) {
      spdlog::warn(
          "host entries that are one machine (boot id {}) have different numbers of ranks ({}): "
          "Open MPI 5's ranks then fail in MPI_Init (\"num local peers ... Bad parameter\", "
          "measured with 5.0.7 on hosts of one host name); give them the same number of slots, "
          "or launch natively (without --mpi)",
          boot_id, fmt::join(counts, " and "));
    }
  }
  // mpirun is a daemon too: a remote host that is this machine shares its session directory.
  const std::string own_boot_id = own_boot_id_text();
  input.daemons_share_machine =
      input.same_machine ||
      (!own_boot_id.empty() && std::binary_search(boot_ids.begin(), boot_ids.end(), own_boot_id));
  if (input.same_machine) {
    const MpirunDialect& d = mpirun_dialect(input.mpi_major);
    spdlog::info(
        "some hosts are the same machine (one boot id): adding {} btl {}{}, as Open MPI's "
        "shared-memory transport crashes across such hosts{}",
        d.mpi_flag,
        input.through_slurm ? std::string("self,tcp") : "^" + std::string(d.shared_memory),
        d.major >= 5 ? " and coll ^han" : "",
        d.major >= 5 ? " and its hierarchical collectives hang there" : "");
  }
  return true;
}

MpiCommandInput command_input(const LaunchOptions& options, const MpirunOptions& own,
                              const Plan& plan) {
  MpiCommandInput input;
  input.mpirun = own.program;
  input.as_root = ::geteuid() == 0;
  input.ssh = options.ssh;
  input.cwd = options.cwd;
  input.extra_args = own.extra_args;
  input.binding_args = own.binding_args;
  // Inside the Slurm allocation the hosts came from: the network check's agents go through srun,
  // and so do mpirun's daemons.
  input.through_slurm = choose_agent_launch(options, plan).name == "srun";
  input.shim = options.ssh.agent_path;
  input.rsh_agent = options.rsh_agent;
  return input;
}

// MASTER_ADDR and MASTER_PORT for the shim: across hosts, rank 0's host as the others reached it
// in the network check and the port its agent listened on there (free again: the agent has
// exited), as a native launch does; on this machine alone, 127.0.0.1 and a port found free here.
std::pair<std::string, std::string> mpi_master(const std::optional<NetCheck>& checked,
                                               const PortRange& range) {
  if (checked && !checked->endpoints.address.empty() && !checked->endpoints.probe_port.empty()) {
    return {checked->endpoints.address.front(),
            std::to_string(checked->endpoints.probe_port.front())};
  }
  const auto [fd, port] = listen_in_range("0.0.0.0", range, "a free port for MASTER_PORT");
  return {"127.0.0.1", std::to_string(port)};
}

}  // namespace

std::unique_ptr<Launcher> MpiLauncher::make(LaunchOptions options, MpirunOptions own) {
  return std::make_unique<MpiLauncher>(std::move(options), std::move(own));
}

void MpiLauncher::check(const Plan& plan) const { (void)choose_agent_launch(options_, plan); }

std::vector<LaunchCommand> MpiLauncher::describe(const Plan& plan) const {
  MpiCommandInput input = command_input(options_, own_, plan);
  input.mpi_major = dry_run_mpi_major(own_.program);
  input.placeholders = true;
  if (!has_remote_host(plan)) input.host_addresses = {"127.0.0.1"};
  input.shim_env = shim_environment(plan, "<set at launch>", "<set at launch>");
  std::vector<LaunchCommand> out;
  if (has_remote_host(plan)) {
    for (LaunchCommand& c : NativeLauncher(options_).describe(plan)) {
      c.where = "the network check's agent " + c.where;
      out.push_back(std::move(c));
    }
  }
  out.push_back({"mpirun on this machine", mpirun_argv(plan, input)});
  return out;
}

namespace {

// What only mpirun knows, after it ended: its exit code is the job's (the failed rank's, or its
// own failure), and its messages may name the rank that failed first.
void take_mpirun_outcome(const MpirunJob& job, LaunchResult& result) {
  if (result.error && result.error->kind == ErrorKind::kJobTimeout) {
    result.exit_code = to_int(exit_code_of(ErrorKind::kJobTimeout));  // hvdrun stopped mpirun
    return;
  }
  if (result.interrupted_by != 0) {
    // hvdrun was stopped by a signal and stopped the job: its code is the signal's, as in a native
    // launch (docs/exit-codes.md), whatever mpirun exits with (the stopped ranks' codes).
    result.exit_code = 128 + result.interrupted_by;
    return;
  }
  if (job.hung()) {
    // What mpirun would have said at its end (which rank failed first) never came.
    result.error = Failure{
        ErrorKind::kLauncher,
        "a rank failed and mpirun aborted the job, then did not end: Open MPI's daemons hung in "
        "their teardown, and mpirun was killed; it had not said which rank failed",
        "the ranks' output above says which failed; an Open MPI daemon (orted) may be left on a "
        "host: ps -ef | grep orted there"};
    result.exit_code = to_int(exit_code_of(ErrorKind::kLauncher));
    return;
  }
  result.exit_code = job.status().code();
  if (result.exit_code == 0) return;
  if (auto rank = failed_rank_from_mpirun(job.own_text());
      rank && *rank < static_cast<int>(result.ranks.size())) {
    RankOutcome& o = result.ranks[static_cast<size_t>(*rank)];
    o.exited = true;
    o.value = result.exit_code;
    result.first_failure = *rank;
  } else if (mpirun_reports_rank_failure(job.own_text())) {
    result.unnamed_rank_failed = true;
    result.error = Failure{
        ErrorKind::kRemote,
        fmt::format("a rank exited with code {}; mpirun did not say which", result.exit_code),
        "mpirun's messages above, and the ranks' output, say more"};
  } else {
    result.error =
        Failure{ErrorKind::kRemote, fmt::format("mpirun exited with code {}", result.exit_code),
                "mpirun's messages above say why"};
  }
}

}  // namespace

LaunchResult MpiLauncher::run(const Plan& plan) {
  const MpiVersion version = check_mpirun(own_.program);
  // Across hosts, the same network check as a native launch first (as horovodrun probes its
  // hosts before mpirun): its agents, then nothing.
  std::optional<NetCheck> checked;
  std::vector<HostFacts> known;
  if (has_remote_host(plan)) {
    LaunchResult check = NativeLauncher(options_).check_network(plan);
    if (check.exit_code != 0) {
      check.launcher = std::string(name());
      return check;
    }
    checked = std::move(check.net);
    known = std::move(check.hosts);
  }
  MpiCommandInput input = command_input(options_, own_, plan);
  input.mpi_major = version.major;
  LaunchResult before;
  if (!learn_hosts(plan, options_, known, input, before)) {
    before.launcher = std::string(name());
    before.exit_code = to_int(exit_code_of(ErrorKind::kSsh));
    return before;
  }
  // Open MPI 4's daemons on one machine need session directories of their own (the daemon shim).
  if (input.daemons_share_machine && version.major == 4) {
    input.session_dir_base = "/tmp/hvdrun-mpi." + plan.job_id;
  }
  const auto [master_addr, master_port] = mpi_master(checked, options_.port_range);
  input.shim_env = shim_environment(plan, master_addr, master_port);
  const std::vector<std::string> argv = mpirun_argv(plan, input);
  spdlog::debug("mpirun command: {}", fmt::join(argv, " "));
  spdlog::debug("phase: starting ranks");  // the phase lines: tests/chaos counts faults by them

  Supervisor supervisor(plan, options_, std::string(name()));
  // mpirun has no agent's dead-man switch: if hvdrun dies, even by SIGKILL, mpirun gets SIGTERM
  // and takes its daemons and ranks down with it.
  ProcessSpec spec;
  spec.argv = argv;
  spec.env = mpirun_environment(plan, input);
  spec.parent_death_signal = SIGTERM;
  spec.lookup_in_our_path = true;
  Process mpirun = Process::spawn(spec);
  if (!mpirun.started()) {
    throw LauncherError("--mpi: " + mpirun.error(), "install Open MPI (Debian: openmpi-bin)");
  }
  // mpirun does not say when each rank starts: --output-filename's files exist from its start.
  for (int rank = 0; rank < static_cast<int>(plan.ranks.size()); ++rank) {
    supervisor.output().open_files(rank);
  }
  MpirunJob job(supervisor, std::move(mpirun), static_cast<int>(plan.ranks.size()),
                std::chrono::milliseconds(static_cast<long>(options_.grace_seconds * 1000)),
                mpirun_dialect(version.major).tag_end);
  LaunchResult result = supervisor.run(job);
  if (job.hung() && !input.session_dir_base.empty()) kill_daemons_here(input.session_dir_base);
  // Open MPI removes its session directories, not the daemons' own directories the shim made
  // under the base: this machine's go (on another machine that is two of the hosts, they stay).
  if (!input.session_dir_base.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(input.session_dir_base, ignored);
  }
  result.command = argv;
  result.net = std::move(checked);
  result.stopped_by = "mpirun";
  result.details = {{"mpirun_version", version.implementation + " " + version.text}};
  for (RankOutcome& o : result.ranks) {
    o.started = true;  // mpirun does not say; it ran them
    o.last_stderr = supervisor.output().last_stderr(o.rank);
  }
  take_mpirun_outcome(job, result);
  return result;
}

}  // namespace hvd::launcher
