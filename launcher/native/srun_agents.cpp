#include "launcher/native/srun_agents.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <optional>
#include <sstream>

#include "agent/agent_connect.h"
#include "agent/sealed_link.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/fd_io.h"
#include "common/pending_eviction.h"
#include "common/port_range.h"
#include "common/spare_fd.h"
#include "common/tcp_listen.h"
#include "launcher/native/rendezvous_server.h"  // random_token

namespace hvd::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHandshakeTime = std::chrono::seconds(5);
constexpr const char* kLeanAgent = "hvdrun-agent";

// An agent on a Slurm node, on its connection back to the launcher, sealed both ways
// (agent/sealed_link.h) with the keys of its exchange.
class TcpAgent final : public AgentTransport {
 public:
  TcpAgent(UniqueFd fd, std::string reached_at, std::string launcher_address,
           const agent::SealKeys& keys, const std::string& node)
      : fd_(std::move(fd)),
        reached_at_(std::move(reached_at)),
        launcher_address_(std::move(launcher_address)),
        sealer_(keys.send),
        opener_(keys.receive, "the agent on " + node) {}
  int read_fd() const override { return fd_.get(); }
  int write_fd() const override { return fd_.get(); }
  // The first node's agent carries srun's own stderr: every task's stderr comes out there.
  UniqueFd& log() override { return log_; }
  void set_log(UniqueFd log) { log_ = std::move(log); }
  std::string log_label(const std::string&) const override { return ""; }  // "srun: ..." lines

  void close_input() override { ::shutdown(fd_.get(), SHUT_WR); }
  void frames_ended() override { close_input(); }
  void abandon() override { ::shutdown(fd_.get(), SHUT_RDWR); }
  bool gone(bool frames_ended) override { return frames_ended; }
  bool remote() const override { return true; }
  std::string lost_detail() const override { return " (its connection to the launcher closed)"; }
  std::optional<AgentAddresses> addresses(const std::vector<agent::NetInterface>&) const override {
    return AgentAddresses{launcher_address_, reached_at_};
  }
  void received(std::string_view bytes, agent::FrameReader& reader) override {
    opener_.open(bytes, reader.input());
  }
  std::string outgoing(std::string frame) override { return sealer_.seal(frame); }

 private:
  UniqueFd fd_;
  std::string reached_at_;
  std::string launcher_address_;
  UniqueFd log_;
  agent::RecordSealer sealer_;
  agent::RecordOpener opener_;
};

std::string local_address_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

std::vector<std::string> node_names(const Plan& plan) {
  std::vector<std::string> out;
  for (const HostPlan& h : plan.hosts) out.push_back(h.spec.host);
  return out;
}

// What srun said so far, kept short for the error message: the first agent's line of its own
// (why it gave up) and the last five others.
struct SrunText {
  std::string partial;
  std::deque<std::string> tail;
  std::string first_agent_line;  // an agent's own words: the cause, where srun's are the effects
  void feed(std::string_view bytes) {
    partial.append(bytes);
    for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      const std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      spdlog::warn("{}{}", line.starts_with("srun:") ? "" : "srun: ", line);
      if (first_agent_line.empty() && line.starts_with("hvdrun agent")) {
        first_agent_line = line;
        continue;
      }
      tail.push_back(line);
      if (tail.size() > 5) tail.pop_front();
    }
  }
  std::string said() const {
    std::string out = first_agent_line;
    for (const std::string& l : tail) out += (out.empty() ? "" : " / ") + l;
    return out.empty() ? partial : out;
  }
};

// A connection in the sealed link's exchange (agent/sealed_link.h): its hello is read, then the
// launcher's reply goes out, then its proof is read.
struct Pending {
  UniqueFd fd;
  std::string in;                                 // of the hello, then of the proof
  std::optional<agent::LauncherHandshake> reply;  // once the hello was whole
  std::string node;
  Clock::time_point until;
};

// Whether `p` has a whole hello, received (then answered) or waiting to be read: an agent's
// arrives in one write right after it connects, and is answered at the loop's next turn. Peeks;
// takes nothing.
bool has_whole_hello(const Pending& p) {
  if (p.reply) return true;
  char buf[agent::kMaxSealHello];
  const ssize_t n = ::recv(p.fd.get(), buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) return false;
  try {
    return agent::parse_seal_hello(std::string(p.in).append(buf, static_cast<size_t>(n)))
        .has_value();
  } catch (const agent::SealError&) {
    return false;
  }
}

// Makes room for one more pending connection (common/pending_eviction.h): the oldest without a
// whole hello goes first; only when every one has one, the oldest (those are answered at the
// next turn anyway, and a wrong proof closes the connection).
void evict_one(std::deque<Pending>& pending) {
  pending.erase(eviction_victim(pending.begin(), pending.end(), has_whole_hello));
}

// Accepts every connection waiting on `listener` into `pending`. Out of descriptors, a pending
// stranger makes room, else the waiting connection is dropped on the spare descriptor: never a
// listener left readable with nothing accepted (a busy loop).
void accept_pending(int listener, std::deque<Pending>& pending, SpareDescriptor& spare) {
  for (;;) {
    UniqueFd conn(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!SpareDescriptor::out_of_descriptors(errno)) return;  // EAGAIN: none left
      if (!pending.empty()) {
        evict_one(pending);
        continue;
      }
      if (!spare.drop_pending(listener)) return;
      continue;
    }
    if (pending.size() >= kSrunMaxPending) evict_one(pending);
    pending.push_back({std::move(conn), {}, std::nullopt, {}, Clock::now() + kHandshakeTime});
  }
}

// The first connection refused as an agent, in words for the launch's error.
struct Refused {
  enum Why { kOtherVersion, kWrongProof };
  std::string what;  // empty: none
  Why why = kOtherVersion;
};

// Takes the exchange one step further with what the connection sent: answers a whole hello,
// checks a whole proof. Reads no byte past the proof (the agent's sealed records follow at once).
// The host index it proved; -1 to drop the connection, -2 to wait for more. A connection that
// claimed to be an agent and was refused (another hvdrun version's agent, a wrong proof) is
// dropped, and the first such is kept in `refused`, for the error when the step then ends (that
// agent gives up) or the start-up times out: a refused connection cannot end the launch by
// itself, as a stranger could make one.
int take_handshake(Pending& p, const std::string& token, const Plan& plan,
                   const std::vector<bool>& have, Refused& refused) {
  for (;;) {
    const std::size_t room = (p.reply ? agent::kSealKeyBytes : agent::kMaxSealHello) - p.in.size();
    char buf[agent::kMaxSealHello];
    const ssize_t n = ::recv(p.fd.get(), buf, room, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return -2;
    if (n <= 0) return -1;
    p.in.append(buf, static_cast<size_t>(n));
    if (!p.reply) {
      std::optional<agent::SealHello> hello;
      try {
        hello = agent::parse_seal_hello(p.in);
        if (!hello) continue;
        // An agent says nothing after its hello until it has the reply.
        if (hello->size != p.in.size()) return -1;
        p.reply.emplace(token, p.in);
      } catch (const agent::SealError&) {
        if (const auto other = agent::other_agent_version(p.in)) {
          if (refused.what.empty() || refused.why != Refused::kOtherVersion) {  // said once
            spdlog::warn("{} connected: every node must run this hvdrun's agent", *other);
          }
          if (refused.what.empty())
            refused = {*other + " connected, refused", Refused::kOtherVersion};
        }
        return -1;  // not an agent of this hvdrun
      }
      p.node = hello->node;
      p.in.clear();
      // 64 bytes on a connection that has sent nothing else: all of it goes, or it is dropped.
      const std::string& reply = p.reply->reply();
      if (::send(p.fd.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
          static_cast<ssize_t>(reply.size())) {
        return -1;
      }
      continue;
    }
    if (p.in.size() < agent::kSealKeyBytes) continue;
    if (!p.reply->check_proof(p.in)) {
      spdlog::warn(
          "a connection to the srun agents' listener, as the agent on {}, did not prove the "
          "launch's secret: dropped (a stranger, or someone between the node and hvdrun)",
          p.node);
      if (refused.what.empty()) {
        refused = {fmt::format("a connection as the agent on {} did not prove the launch's secret, "
                               "refused",
                               p.node),
                   Refused::kWrongProof};
      }
      return -1;
    }
    for (std::size_t h = 0; h < plan.hosts.size(); ++h) {
      if (plan.hosts[h].spec.host == p.node && !have[h]) return static_cast<int>(h);
    }
    spdlog::warn("an agent for node {} connected, which the plan does not have or has already",
                 p.node);
    return -1;
  }
}

}  // namespace

std::vector<std::string> srun_agent_argv(const Plan& plan, const LaunchOptions& options) {
  const std::string n = std::to_string(plan.hosts.size());
  std::vector<std::string> argv{"srun",
                                "--nodes=" + n,
                                "--ntasks=" + n,
                                "--ntasks-per-node=1",
                                fmt::format("--nodelist={}", fmt::join(node_names(plan), ",")),
                                "--whole",  // the node's whole allocation: ranks run in it
                                "--kill-on-bad-exit=1",
                                "--input=none",
                                "--job-name=hvdrun-agents"};
  // No --cpu-bind: the one task per node holds the node's whole allocation (--whole), so any
  // binding Slurm applies covers every CPU the ranks (the agent's children) may use.
  argv.insert(argv.end(), {srun_agent_program(options.hvdrun_path), "--agent-connect"});
  return argv;
}

std::string srun_agent_program(const std::string& hvdrun_path) {
  const std::filesystem::path lean = std::filesystem::path(hvdrun_path).parent_path() / kLeanAgent;
  if (hvdrun_path.find('/') != std::string::npos && ::access(lean.c_str(), X_OK) == 0) {
    return lean.string();
  }
  return hvdrun_path;
}

std::map<std::string, std::string> parse_scontrol_nodes(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name, addr;
    for (std::string w; words >> w;) {
      if (w.starts_with("NodeName=")) name = w.substr(9);
      if (w.starts_with("NodeAddr=")) addr = w.substr(9);
    }
    if (!name.empty() && !addr.empty()) out[name] = addr;
  }
  return out;
}

std::map<std::string, std::string> slurm_node_addresses(const std::vector<std::string>& nodes) {
  ProcessSpec spec;
  spec.argv = {"scontrol", "-o", "show", "node", fmt::format("{}", fmt::join(nodes, ","))};
  spec.env = environ_strings();
  spec.lookup_in_our_path = true;
  const auto run = run_and_capture(spec);
  if (!run || run->status.code() != 0) return {};
  return parse_scontrol_nodes(run->output);
}

SrunAgents start_srun_agents(const Plan& plan, const LaunchOptions& options) {
  const std::string token = random_token();
  const std::vector<std::string> nodes = node_names(plan);
  // Every address: the agents connect to where srun itself runs as the nodes see it
  // (SLURM_SRUN_COMM_HOST in each task's environment), which only srun knows. The listener
  // lives only until every agent has connected, and only a proof of the token (the sealed
  // link's exchange: agent/sealed_link.h) makes a connection one.
  auto [listener, port] =
      listen_in_range("0.0.0.0", options.port_range, "the listener for the srun agents");
  ::fcntl(listener.get(), F_SETFL, ::fcntl(listener.get(), F_GETFL) | O_NONBLOCK);
  ProcessSpec spec;
  spec.argv = srun_agent_argv(plan, options);
  spec.env = environ_strings();
  spec.env.push_back(
      fmt::format("{}={} {}", agent::kAgentConnectVar, agent::kAgentConnectSrunHost, port));
  spec.env.push_back(fmt::format("{}={}", agent::kAgentTokenVar, token));
  spec.lookup_in_our_path = true;
  spec.parent_death_signal = SIGKILL;  // srun killed alone cancels its step (its helper asks)
  SrunAgents out;
  out.srun = Process::spawn(spec);
  if (!out.srun.started()) {
    throw LauncherError("cannot start srun: " + out.srun.error(),
                        "--launcher srun needs Slurm's srun on PATH (or use --launcher ssh)");
  }

  // While the step starts: libcrypto readies the sealed link's algorithms (4-15 ms the first
  // time), not on the first agent's connection.
  agent::warm_up_sealed_link();
  // The nodes' addresses while the step starts (srun takes tens of milliseconds; scontrol a few).
  const std::map<std::string, std::string> node_addr = slurm_node_addresses(nodes);
  if (node_addr.size() < nodes.size()) {
    spdlog::warn(
        "scontrol did not give every node's NodeAddr; those nodes are advertised at the "
        "address their agent connected from");
  }
  std::vector<std::unique_ptr<TcpAgent>> transports(plan.hosts.size());
  std::size_t connected = 0;
  std::deque<Pending> pending;
  SrunText srun_text;
  const auto deadline = Clock::now() + options.start_timeout;
  std::vector<bool> have(plan.hosts.size(), false);
  SpareDescriptor spare;
  Refused refused;
  // When agents did not connect: a connection refused as one, if any, is said first, and the
  // hint is then about it.
  const auto other_said = [&] { return refused.what.empty() ? "" : "; " + refused.what; };
  const auto agent_hint = [&](const std::string& usual) {
    if (refused.what.empty()) return usual;
    if (refused.why == Refused::kWrongProof) {
      return std::string(
          "a node's agent and hvdrun did not agree on the launch's secret: someone between "
          "them changed the exchange, or a stranger raced the agent; check the network path "
          "between the nodes and this machine");
    }
    return fmt::format(
        "install this hvdrun on every node, with {} beside hvdrun at the same "
        "path as here",
        spec.argv[spec.argv.size() - 2]);
  };
  while (connected < plan.hosts.size()) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::vector<std::string> late;
      for (std::size_t h = 0; h < nodes.size(); ++h) {
        if (!have[h]) late.push_back(nodes[h]);
      }
      throw TimeoutError(
          fmt::format("start-up timed out after {:.0f} s in the agent handshake (srun); no agent "
                      "connected from: {}{}{}",
                      std::chrono::duration<double>(options.start_timeout).count(),
                      fmt::join(late, ", "), other_said(),
                      srun_text.said().empty() ? "" : "; srun said: " + srun_text.said()),
          agent_hint("the step may wait for resources (squeue -s shows it), or the nodes cannot "
                     "reach this machine: raise --start-timeout, or check the network between "
                     "them"));
    }
    if (out.srun.try_reap()) {
      throw RemoteError(
          fmt::format("srun ended ({}) before every node's agent connected{}{}",
                      out.srun.status()->signaled
                          ? fmt::format("killed by signal {}", out.srun.status()->value)
                          : fmt::format("exit {}", out.srun.status()->value),
                      other_said(),
                      srun_text.said().empty() ? "" : "; srun said: " + srun_text.said()),
          agent_hint(fmt::format("run hvdrun inside the allocation (salloc, sbatch), check that "
                                 "every node has {} at the same path, or use --launcher ssh",
                                 spec.argv[spec.argv.size() - 2])));
    }
    std::erase_if(pending, [&](const Pending& p) { return p.until <= now; });
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}, {out.srun.err().get(), POLLIN, 0}};
    for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    const int wait_ms = static_cast<int>(std::clamp<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count(), 1, 200));
    if (::poll(fds.data(), fds.size(), wait_ms) <= 0) continue;
    if (fds[1].revents != 0) {
      char buf[4096];
      const long n = read_some(out.srun.err().get(), buf, sizeof buf);
      if (n > 0) srun_text.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pending& p = pending[i - 2];
      const int h = take_handshake(p, token, plan, have, refused);
      if (h == -2) continue;
      if (h >= 0 && !have[static_cast<std::size_t>(h)]) {
        const std::size_t host = static_cast<std::size_t>(h);
        have[host] = true;
        ++connected;
        ::fcntl(p.fd.get(), F_SETFL, 0);
        int yes = 1;
        ::setsockopt(p.fd.get(), IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        const std::string launcher_address = local_address_of(p.fd.get());
        const auto addr = node_addr.find(nodes[host]);
        std::string reached = addr != node_addr.end() ? addr->second : "";
        if (reached.empty()) {
          sockaddr_in peer{};
          socklen_t len = sizeof peer;
          char text[INET_ADDRSTRLEN] = {};
          if (::getpeername(p.fd.get(), reinterpret_cast<sockaddr*>(&peer), &len) == 0) {
            ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
          }
          reached = text;
        }
        transports[host] = std::make_unique<TcpAgent>(std::move(p.fd), reached, launcher_address,
                                                      p.reply->keys(), nodes[host]);
      }
      p.until = Clock::time_point{};  // taken or dropped
    }
    std::erase_if(pending, [](const Pending& p) { return p.until == Clock::time_point{}; });
    if (fds[0].revents != 0) accept_pending(listener.get(), pending, spare);
  }
  // srun's stderr from here on: the first node's agent carries it (every task's stderr).
  transports[0]->set_log(std::move(out.srun.err()));
  for (std::size_t h = 0; h < plan.hosts.size(); ++h) {
    out.agents.emplace_back(static_cast<int>(h), std::move(transports[h]));
  }
  return out;
}

}  // namespace hvd::launcher
