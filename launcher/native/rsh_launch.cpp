#include "launcher/native/rsh_launch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/process.h"
#include "common/shell_quote.h"
#include "common/user_account.h"

namespace hvd::launcher {
namespace {

constexpr std::string_view kPlaceholders[] = {"host", "user", "port"};

std::optional<std::uint32_t> ipv4_of(const std::string& text) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

bool same_network(const OwnNetwork& net, std::uint32_t address) {
  const auto own = ipv4_of(net.address);
  if (!own) return false;
  const std::uint32_t mask = net.prefix <= 0 ? 0 : 0xffffffffu << (32 - net.prefix);
  return (*own & mask) == (address & mask);
}

// Our address on a network that holds `address`, not loopback unless `address` is.
std::optional<std::string> our_address_towards(const std::vector<OwnNetwork>& own_nets,
                                               const std::string& address) {
  const auto value = ipv4_of(address);
  if (!value) return std::nullopt;
  const bool loopback = (*value >> 24) == 127;
  for (const OwnNetwork& net : own_nets) {
    const bool net_loopback = net.address.rfind("127.", 0) == 0;
    if (net_loopback == loopback && same_network(net, *value)) return net.address;
  }
  return std::nullopt;
}

std::string describe_nets(const std::vector<OwnNetwork>& nets) {
  std::string out;
  for (const OwnNetwork& n : nets) {
    if (n.address.rfind("127.", 0) == 0) continue;
    out += fmt::format("{}{} {}/{}", out.empty() ? "" : ", ", n.interface, n.address, n.prefix);
  }
  return out.empty() ? "none but loopback" : out;
}

// Same interfaces, same addresses: the agent runs in this machine's own network namespace.
bool same_interfaces(const std::vector<agent::NetInterface>& a,
                     const std::vector<agent::NetInterface>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].ipv4 != b[i].ipv4 || a[i].ipv6 != b[i].ipv6) return false;
  }
  return true;
}

// One host's agent: the user's command as our child, its stdin and stdout the frames, its
// stderr the agent's (and the command's own) diagnostics.
class RshAgent final : public ChildAgent {
 public:
  RshAgent(Process process, std::string host, std::vector<std::string> argv,
           std::shared_ptr<const std::vector<agent::NetInterface>> own_interfaces,
           std::shared_ptr<const std::vector<OwnNetwork>> own_nets, NetworkChoice choice)
      : ChildAgent(std::move(process)),
        host_(std::move(host)),
        argv_(std::move(argv)),
        own_interfaces_(std::move(own_interfaces)),
        own_nets_(std::move(own_nets)),
        choice_(std::move(choice)) {}

  // abandon() (ChildAgent's) kills the command; what it started on the host sees its input
  // close (kubectl and docker end the remote process; under `ip netns exec` the command is the
  // agent itself), and the agent's dead-man switch stops its ranks.
  std::optional<int> exit_status() const override {
    if (!process_.status()) return std::nullopt;
    return process_.status()->signaled ? -process_.status()->value : process_.status()->value;
  }
  bool remote() const override { return true; }
  std::string lost_detail() const override {
    return fmt::format(
        " (its --rsh-agent command ended{}: {})",
        process_.status() ? fmt::format(" with status {}", process_.status()->code()) : "",
        shell_join(argv_));
  }
  std::string log_label(const std::string& host) const override {
    return "--rsh-agent command for " + host;
  }
  std::optional<AgentAddresses> addresses(
      const std::vector<agent::NetInterface>& agent_interfaces) const override {
    return choose_rsh_addresses(host_, agent_interfaces, *own_interfaces_, *own_nets_, choice_);
  }
  std::optional<Failure> failed_before_hello(const std::string& said) const override {
    // Its output closed: the command is ending. Its status says how (a kill is not a refusal);
    // wait a moment for it rather than guess.
    for (int i = 0; i < 100 && !process_.try_reap(); ++i) ::usleep(10000);
    const auto& status = process_.status();
    const std::string command = shell_join(argv_);
    const std::string stderr_tail =
        said.empty() ? "it wrote nothing on stderr" : "its stderr ends: " + said;
    if (status && status->signaled) {
      return Failure{ErrorKind::kHostLost,
                     fmt::format("{}: the --rsh-agent command was killed by signal {} before the "
                                 "agent answered; {}; the command: {}",
                                 host_, status->value, stderr_tail, command),
                     "run that command by hand to see what ends it"};
    }
    return Failure{
        ErrorKind::kRemote,
        fmt::format(
            "{}: the --rsh-agent command {} before the agent answered; {}; the "
            "command: {}",
            host_,
            status ? fmt::format("exited with status {}", status->code()) : "closed its output",
            stderr_tail, command),
        "run that command by hand: it must start hvdrun's agent on that host, which then "
        "waits for its job on stdin (check the host's name, that the command works from this "
        "machine, and that hvdrun is installed there at that path, or give it with "
        "--agent-path)"};
  }
  std::string command_line() const override { return shell_join(argv_); }

 private:
  std::string host_;
  std::vector<std::string> argv_;
  std::shared_ptr<const std::vector<agent::NetInterface>> own_interfaces_;
  std::shared_ptr<const std::vector<OwnNetwork>> own_nets_;
  NetworkChoice choice_;
};

class RshLaunch final : public AgentLaunch {
 public:
  explicit RshLaunch(const LaunchOptions& options)
      : options_(options), template_(parse_rsh_template(options.rsh_agent.value_or(""))) {}

  std::string_view name() const override { return "rsh"; }

  std::vector<LaunchCommand> describe(const Plan& plan) const override {
    std::vector<LaunchCommand> out;
    for (const HostPlan& h : plan.hosts) {
      if (h.local) {
        out.push_back(local_agent_command(h, options_.hvdrun_path));
      } else {
        out.push_back({"on " + h.spec.host +
                           " through --rsh-agent (no shell; the job spec on "
                           "its stdin)",
                       argv_for(h)});
      }
    }
    return out;
  }

  std::vector<std::string> command(const Plan& plan) const override {
    for (const HostPlan& h : plan.hosts) {
      if (!h.local) return argv_for(h);
    }
    return {options_.hvdrun_path, "--agent"};
  }

  StartedAgents start(const Plan& plan, Clock::time_point, bool) override {
    network_ = plan.network;
    StartedAgents out;
    out.held_signals =
        std::make_unique<SignalFd>(std::initializer_list<int>{SIGINT, SIGTERM, SIGHUP});
    for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
      const HostPlan& host = plan.hosts[h];
      out.agents.emplace_back(h, host.local ? start_local_agent(options_.hvdrun_path)
                                            : start_command(host.spec.host, argv_for(host)));
    }
    return out;
  }

  std::unique_ptr<AgentStarter> start_one(const HostSpec& host, bool local) override {
    if (local) return AgentStarter::local(host.host, options_.hvdrun_path);
    AgentStarter::Result r;
    try {
      HostPlan h;
      h.spec = host;
      const auto account = current_account();
      h.ssh_user = host.user.value_or(account ? account->name : "root");
      h.ssh_port = host.port.value_or(options_.ssh.port.value_or(22));
      r.transport = start_command(host.host, argv_for(h));
    } catch (const Error& e) {
      r.error = e.what();
    }
    return std::make_unique<AgentStarter>(host.host, std::move(r));
  }

 private:
  std::vector<std::string> argv_for(const HostPlan& h) const {
    return rsh_agent_argv(template_, h.spec.host, h.ssh_user, h.ssh_port, options_.ssh.agent_path);
  }

  // The command sees hvdrun's whole environment (kubectl needs its KUBECONFIG, PATH, ...);
  // what the agent sees is the command's to decide (`ip netns exec` passes it on, kubectl and
  // docker give the container's).
  std::unique_ptr<AgentTransport> start_command(const std::string& host,
                                                std::vector<std::string> argv) {
    if (!own_interfaces_) {
      own_interfaces_ =
          std::make_shared<const std::vector<agent::NetInterface>>(agent::list_interfaces());
      own_nets_ = std::make_shared<const std::vector<OwnNetwork>>(own_networks());
    }
    ProcessSpec spec;
    spec.argv = argv;
    spec.env = environ_strings();
    spec.stdin_pipe = true;
    spec.lookup_in_our_path = true;
    Process process = Process::spawn(spec);
    if (!process.started()) {
      throw RemoteError(fmt::format("{}: cannot start the --rsh-agent command: {}; the command: {}",
                                    host, process.error(), shell_join(argv)),
                        "check --rsh-agent's first word: it must be a program on this "
                        "machine's PATH, or a path");
    }
    spdlog::debug("host {}: --rsh-agent: {}", host, shell_join(argv));
    return std::make_unique<RshAgent>(std::move(process), host, std::move(argv), own_interfaces_,
                                      own_nets_, network_);
  }

  LaunchOptions options_;
  RshTemplate template_;
  NetworkChoice network_;  // the plan's --network-cidr / --network-interface
  std::shared_ptr<const std::vector<agent::NetInterface>> own_interfaces_;
  std::shared_ptr<const std::vector<OwnNetwork>> own_nets_;
};

}  // namespace

std::unique_ptr<AgentLaunch> make_rsh_launch(const LaunchOptions& options) {
  return std::make_unique<RshLaunch>(options);
}

RshTemplate parse_rsh_template(const std::string& text) {
  const auto bad = [&](const std::string& what) {
    return UsageError(fmt::format("--rsh-agent '{}': {}", text, what),
                      "e.g. --rsh-agent 'kubectl exec -i {host} --': words split as a shell "
                      "would (quotes honoured, nothing expanded), with {host}, {user} and "
                      "{port} replaced");
  };
  RshTemplate out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      } else {
        word += c;
      }
      continue;
    }
    if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) {
        word += text[++i];
      } else {
        word += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '\\') {
      if (i + 1 == text.size()) throw bad("it ends with a backslash");
      word += text[++i];
    } else {
      word += c;
    }
  }
  if (quote != 0) throw bad(fmt::format("unbalanced quotes: a {} is not closed", quote));
  if (in_word) out.words.push_back(std::move(word));
  if (out.words.empty())
    throw bad(
        "the template is empty: it needs the command that starts a "
        "program on a host");
  for (const std::string& w : out.words) {
    for (size_t at = w.find('{'); at != std::string::npos; at = w.find('{', at + 1)) {
      const size_t end = w.find('}', at);
      if (end == std::string::npos) continue;
      const std::string name = w.substr(at + 1, end - at - 1);
      const bool identifier = !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
      });
      if (!identifier) continue;  // other braces are the command's
      if (std::find(std::begin(kPlaceholders), std::end(kPlaceholders), name) ==
          std::end(kPlaceholders)) {
        throw bad(
            fmt::format("unknown placeholder {{{}}}: the placeholders are {{host}}, "
                        "{{user}} and {{port}}",
                        name));
      }
      if (name == "host") out.names_host = true;
    }
  }
  return out;
}

namespace {

// The template's words for one host, placeholders replaced, the host appended when no word
// names it.
std::vector<std::string> expand(const RshTemplate& tmpl, const std::string& host,
                                const std::string& user, int port) {
  const auto replace_all = [](std::string w, std::string_view from, const std::string& to) {
    for (size_t at = w.find(from); at != std::string::npos; at = w.find(from, at + to.size())) {
      w.replace(at, from.size(), to);
    }
    return w;
  };
  std::vector<std::string> argv;
  for (const std::string& w : tmpl.words) {
    argv.push_back(replace_all(replace_all(replace_all(w, "{host}", host), "{user}", user),
                               "{port}", std::to_string(port)));
  }
  if (!tmpl.names_host) argv.push_back(host);
  return argv;
}

}  // namespace

std::vector<std::string> rsh_agent_argv(const RshTemplate& tmpl, const std::string& host,
                                        const std::string& user, int port,
                                        const std::string& agent_path) {
  std::vector<std::string> argv = expand(tmpl, host, user, port);
  argv.push_back(agent_path);
  argv.push_back("--agent");
  return argv;
}

int exec_rsh_agent_shim(const std::vector<std::string>& args) {
  const char* text = std::getenv(kRshAgentTemplateVar);
  if (args.size() < 2 || text == nullptr) {
    std::fprintf(stderr,
                 "hvdrun --rsh-agent-shim: usage: %s=TEMPLATE hvdrun --rsh-agent-shim HOST "
                 "COMMAND... (mpirun's plm_rsh_agent under hvdrun --mpi --rsh-agent)\n",
                 kRshAgentTemplateVar);
    return 70;
  }
  RshTemplate tmpl;
  try {
    tmpl = parse_rsh_template(text);
  } catch (const Error& e) {
    std::fprintf(stderr, "hvdrun --rsh-agent-shim: %s\n", e.what());
    return 70;
  }
  std::string command;
  for (size_t i = 1; i < args.size(); ++i) command += (i > 1 ? " " : "") + args[i];
  const auto account = current_account();
  std::vector<std::string> argv = expand(tmpl, args[0], account ? account->name : "root", 22);
  argv.insert(argv.end(), {"sh", "-c", command});
  std::vector<char*> cargv;
  for (std::string& w : argv) cargv.push_back(w.data());
  cargv.push_back(nullptr);
  ::execvp(cargv[0], cargv.data());
  const int err = errno;
  std::fprintf(stderr, "hvdrun --rsh-agent-shim: cannot run %s: %s\n", argv[0].c_str(),
               std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

std::vector<OwnNetwork> own_networks() {
  std::vector<OwnNetwork> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET ||
        it->ifa_netmask == nullptr || (it->ifa_flags & IFF_UP) == 0) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text,
                sizeof text);
    const std::uint32_t mask =
        ntohl(reinterpret_cast<sockaddr_in*>(it->ifa_netmask)->sin_addr.s_addr);
    out.push_back({it->ifa_name, text, __builtin_popcount(mask)});
  }
  ::freeifaddrs(list);
  return out;
}

AgentAddresses choose_rsh_addresses(const std::string& host,
                                    const std::vector<agent::NetInterface>& agent_interfaces,
                                    const std::vector<agent::NetInterface>& own_interfaces,
                                    const std::vector<OwnNetwork>& own_nets,
                                    const NetworkChoice& choice) {
  // 1. An address given: chosen on the host (--network-cidr / --network-interface), or the host
  // name itself.
  std::optional<std::string> given;
  if (choice.active()) {
    given = choose_address(choice, agent_interfaces, host).address;
  } else if (ipv4_of(host)) {
    given = host;
  }
  if (given) {
    if (auto ours = our_address_towards(own_nets, *given)) return {*ours, *given};
    for (const OwnNetwork& n : own_nets) {
      if (n.address.rfind("127.", 0) != 0) return {n.address, *given};
    }
    return {"127.0.0.1", *given};
  }
  // 2. This machine's own network namespace.
  if (same_interfaces(agent_interfaces, own_interfaces)) return {"127.0.0.1", "127.0.0.1"};
  // 3. The agent's first address on a network of ours.
  for (const agent::NetInterface& i : agent_interfaces) {
    if (!i.up || i.loopback) continue;
    for (const std::string& a : i.ipv4) {
      if (auto ours = our_address_towards(own_nets, a)) return {*ours, a};
    }
  }
  throw Error(fmt::format("{}: none of the addresses its agent reports ({}) is on a network of "
                          "this machine ({}), so hvdrun cannot tell where its ranks listen",
                          host, describe_interfaces(agent_interfaces), describe_nets(own_nets)),
              "give --network-cidr (or --network-interface) naming the network the hosts and "
              "this machine share, or use host names that are addresses",
              ErrorKind::kNetCheck);
}

}  // namespace hvd::launcher
