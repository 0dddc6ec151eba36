#include "launcher/plan/discovery.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/fd_io.h"

extern char** environ;

namespace hvd::launcher {
namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// What parse_host_list says about "-H entry 1 'x'", said about the script's line instead.
std::string about_line(std::string message, int line_no) {
  const std::string from = "-H entry 1";
  if (const auto at = message.find(from); at != std::string::npos) {
    message.replace(at, from.size(), fmt::format("line {}", line_no));
  }
  return message;
}

}  // namespace

std::vector<HostSpec> parse_discovery_output(std::string_view text, int default_slots) {
  std::vector<HostSpec> hosts;
  std::set<std::string> seen;
  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto newline = text.find('\n', start);
    const std::string_view raw = text.substr(start, newline - start);
    ++line_no;
    start = newline == std::string_view::npos ? text.size() : newline + 1;
    const std::string where = fmt::format("the host discovery script's output, line {}", line_no);
    if (raw.size() > kMaxDiscoveryLine) {
      throw Error(fmt::format("{}: {} bytes (at most {})", where, raw.size(), kMaxDiscoveryLine),
                  "print one host[:slots] per line");
    }
    if (raw.find('\0') != std::string_view::npos) {
      throw Error(fmt::format("{}: a NUL byte", where), "print one host[:slots] per line");
    }
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    HostSpec spec;
    try {
      spec = parse_host_list(line).front();
    } catch (const Error& e) {
      throw Error(
          fmt::format("the host discovery script's output: {}", about_line(e.what(), line_no)),
          "print one host[:slots] per line, e.g. 10.0.0.1:4 (IPv6 in brackets)");
    }
    // A bare name takes --slots-per-host; `name:N` says its own.
    const bool bracketed = line.front() == '[';
    const bool has_slots = bracketed ? line.find("]:") != std::string_view::npos
                                     : line.find(':') != std::string_view::npos;
    if (!has_slots) spec.slots = default_slots;
    spec.origin = fmt::format("discovery line {}", line_no);
    if (!seen.insert(spec.host).second) {
      // horovodrun takes the set of lines: the same line twice is one host. The same host with
      // other slots is ambiguous (which line wins in horovodrun depends on a set's order).
      const auto same = std::find_if(hosts.begin(), hosts.end(), [&](const HostSpec& h) {
        return h.host == spec.host && h.slots == spec.slots && h.port == spec.port &&
               h.user == spec.user;
      });
      if (same != hosts.end()) continue;
      throw Error(
          fmt::format("{}: {} is listed twice, with other slots", where, format_host(spec.host)),
          "list each host once, with all its slots (host:N)");
    }
    if (hosts.size() == kMaxDiscoveryHosts) {
      throw Error(
          fmt::format("the host discovery script listed more than {} hosts", kMaxDiscoveryHosts));
    }
    hosts.push_back(std::move(spec));
  }
  return hosts;
}

void DiscoveryRunner::start(Clock::time_point now) {
  ProcessSpec spec;
  spec.argv = {path_};
  for (char** e = environ; *e != nullptr; ++e) spec.env.emplace_back(*e);
  spec.lookup_in_our_path = true;
  out_.clear();
  err_.clear();
  too_much_ = false;
  Process p = Process::spawn(spec);
  deadline_ = now + timeout_;
  if (!p.started()) {
    err_ = p.error();
    process_.reset();
    failed_to_start_ = true;
    return;
  }
  failed_to_start_ = false;
  process_.emplace(std::move(p));
}

int DiscoveryRunner::out_fd() const {
  return process_ && process_->out().valid() ? process_->out().get() : -1;
}
int DiscoveryRunner::err_fd() const {
  return process_ && process_->err().valid() ? process_->err().get() : -1;
}

bool DiscoveryRunner::on_readable() {
  if (!process_) return true;
  for (auto [fd, text] : {std::pair{&process_->out(), &out_}, std::pair{&process_->err(), &err_}}) {
    if (!fd->valid()) continue;
    pollfd p{fd->get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char buf[65536];
    const long n = read_some(fd->get(), buf, sizeof buf);
    if (n <= 0) {
      fd->reset();
      continue;
    }
    text->append(buf, static_cast<std::size_t>(n));
    if (text->size() > kMaxDiscoveryOutput) {
      too_much_ = true;
      text->resize(kMaxDiscoveryOutput);
    }
  }
  return !process_->out().valid() && !process_->err().valid();
}

void DiscoveryRunner::take_what_is_left() {
  for (auto [fd, text] : {std::pair{&process_->out(), &out_}, std::pair{&process_->err(), &err_}}) {
    while (fd->valid() && !too_much_) {
      pollfd p{fd->get(), POLLIN, 0};
      char buf[65536];
      const long n = ::poll(&p, 1, 0) > 0 ? read_some(fd->get(), buf, sizeof buf) : 0;
      if (n <= 0) break;
      text->append(buf, static_cast<std::size_t>(n));
      if (text->size() > kMaxDiscoveryOutput) {
        too_much_ = true;
        text->resize(kMaxDiscoveryOutput);
      }
    }
    fd->reset();
  }
}

std::optional<DiscoveryRunner::Outcome> DiscoveryRunner::finish(Clock::time_point now) {
  const auto stderr_tail = [&] {
    std::string tail = err_.size() > 400 ? err_.substr(err_.size() - 400) : err_;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    return tail.empty() ? std::string() : fmt::format(" (its stderr: {})", tail);
  };
  if (!process_) {
    if (!failed_to_start_) return std::nullopt;
    failed_to_start_ = false;
    deadline_.reset();
    return Outcome{std::nullopt, fmt::format("the host discovery script {}: {}", path_, err_)};
  }
  const bool late = deadline_ && now >= *deadline_;
  if (too_much_ || late) {
    process_->signal_group(SIGKILL);
    process_->wait();
    process_.reset();
    deadline_.reset();
    return Outcome{std::nullopt,
                   too_much_ ? fmt::format("the host discovery script {} printed more than {} "
                                           "bytes; killed it",
                                           path_, kMaxDiscoveryOutput)
                             : fmt::format("the host discovery script {} ran longer than {:.0f} "
                                           "s; killed it{}",
                                           path_, std::chrono::duration<double>(timeout_).count(),
                                           stderr_tail())};
  }
  // The script's exit ends the run, not its pipes' EOF: a background process it left behind may
  // hold them open for good. What it wrote before it exited is in the pipes: taken now.
  if (!process_->status() && !process_->try_reap()) return std::nullopt;
  take_what_is_left();
  if (too_much_) return finish(now);  // over the bound: the message above
  const ExitStatus status = *process_->status();
  process_.reset();
  deadline_.reset();
  if (status.code() != 0) {
    return Outcome{std::nullopt,
                   fmt::format("the host discovery script {} {} {}{}", path_,
                               status.signaled ? "was killed by signal" : "exited with",
                               status.value, stderr_tail())};
  }
  if (have_good_out_ && out_ == last_good_out_) return Outcome{std::nullopt, {}, true};
  try {
    Outcome outcome{parse_discovery_output(out_, default_slots_), {}};
    last_good_out_ = std::move(out_);
    have_good_out_ = true;
    return outcome;
  } catch (const Error& e) {
    return Outcome{std::nullopt, e.what()};
  }
}

DiscoveryListing DiscoveryRunner::run_once(const std::string& path, int default_slots,
                                           std::chrono::milliseconds timeout) {
  DiscoveryRunner runner(path, default_slots, timeout);
  runner.start(Clock::now());
  for (;;) {
    if (const auto outcome = runner.finish(Clock::now())) {
      if (!outcome->hosts) {  // a fresh runner: never `unchanged`
        throw Error(outcome->error,
                    "run the script by hand: it must exit 0 and print host[:slots] lines",
                    ErrorKind::kUsage);
      }
      return {std::move(*outcome->hosts), std::move(runner.last_good_out_)};
    }
    std::vector<pollfd> fds{{runner.out_fd(), POLLIN, 0}, {runner.err_fd(), POLLIN, 0}};
    const bool open = fds[0].fd >= 0 || fds[1].fd >= 0;
    if (open) {
      ::poll(fds.data(), fds.size(), 50);
      runner.on_readable();
    } else {
      ::usleep(10000);  // the pipes are closed: it is about to exit
    }
  }
}

}  // namespace hvd::launcher
