#include "allreduce/engine/tcp_cycle_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/status_error.h"

namespace hvd::runtime {
namespace {

// As the control plane's: a longer length is garbage, not a message.
constexpr std::size_t kMaxMessage = 64u << 20;

void put_u32(std::string& out, std::size_t n) {
  const auto v = static_cast<std::uint32_t>(n);
  out.append(reinterpret_cast<const char*>(&v), 4);
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

TcpCycleTransport::TcpCycleTransport(ControlPlane plane, std::chrono::milliseconds send_timeout)
    : plane_(std::move(plane)),
      send_timeout_(send_timeout),
      rank_(plane_.rank()),
      size_(plane_.size()) {
  const auto n = static_cast<std::size_t>(size_);
  inbox_.resize(n);
  have_.resize(n);
  gathered_.resize(n);
}

void TcpCycleTransport::start(std::string contribution, std::size_t /*data_bytes*/) {
  begin(Round::kGather, std::move(contribution));
}

void TcpCycleTransport::start_and(std::vector<std::uint64_t> words) {
  begin(Round::kAnd, std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8));
}

const std::vector<std::string>* TcpCycleTransport::gathered() {
  if (round_ != Round::kGather) {
    throw StatusError(HVD_ERR_INTERNAL, "the engine polled an allgather round it did not start");
  }
  if (!complete_) complete_ = poll();
  return complete_ ? &gathered_ : nullptr;
}

std::optional<std::vector<std::uint64_t>> TcpCycleTransport::anded() {
  if (round_ != Round::kAnd) {
    throw StatusError(HVD_ERR_INTERNAL, "the engine polled an AND round it did not start");
  }
  if (!complete_) complete_ = poll();
  if (!complete_) return std::nullopt;
  return anded_;
}

void TcpCycleTransport::abort(const std::string& why, hvd_status status) {
  if (rank_ != 0) return;
  std::string message;
  put_u32(message, 1 + 4 + why.size());
  message += static_cast<char>(Round::kFatal);
  put_u32(message, static_cast<std::size_t>(status));
  message += why;
  for (int r = 1; r < size_; ++r) {
    // Never blocks: a rank whose socket is full, or gone, learns it from the control plane.
    (void)!::send(plane_.peer(r), message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void TcpCycleTransport::begin(Round kind, std::string part) {
  if (round_ != Round::kNone && !complete_) {
    throw StatusError(HVD_ERR_INTERNAL,
                      "the engine started a negotiation round before the last one completed");
  }
  round_ = kind;
  complete_ = false;
  if (rank_ == 0) {
    gathered_[0] = std::move(part);
    have_.assign(have_.size(), false);
    have_[0] = true;
  } else {
    outbox_.clear();
    put_u32(outbox_, part.size() + 1);
    outbox_ += static_cast<char>(kind);
    outbox_ += part;
  }
  complete_ = poll();  // a job of one rank completes here; the others send what the socket takes
}

bool TcpCycleTransport::poll() { return rank_ == 0 ? poll_root() : poll_member(); }

bool TcpCycleTransport::poll_root() {
  for (int r = 1; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (have_[i]) continue;
    const bool closed = read_from(r);
    std::string m = take_message(r);
    if (m.empty()) {
      if (closed) gone(r);
      continue;
    }
    if (m.front() != static_cast<char>(round_)) {
      lost(r, fmt::format("sent a negotiation message of another round ('{}' in a '{}' round)",
                          m.front(), static_cast<char>(round_)));
    }
    gathered_[i].assign(m, 1);
    have_[i] = true;
  }
  if (std::find(have_.begin(), have_.end(), false) != have_.end()) return false;

  // Every part is here: the result, to every rank (they are all in the round, polling it).
  std::string result;
  put_u32(result, 0);  // the frame's length, set below
  result += static_cast<char>(round_);
  if (round_ == Round::kGather) {
    for (const std::string& p : gathered_) {
      put_u32(result, p.size());
      result += p;
    }
  } else {
    const std::size_t words = gathered_[0].size() / 8;
    anded_.assign(words, ~std::uint64_t{0});
    for (int r = 0; r < size_; ++r) {
      const auto& p = gathered_[static_cast<std::size_t>(r)];
      if (p.size() != words * 8) {
        lost(r, fmt::format("brought {} bytes to an AND round of {} words", p.size(), words));
      }
      for (std::size_t w = 0; w < words; ++w) {
        std::uint64_t v;
        std::memcpy(&v, p.data() + 8 * w, 8);
        anded_[w] &= v;
      }
    }
    result.append(reinterpret_cast<const char*>(anded_.data()), words * 8);
  }
  const auto length = static_cast<std::uint32_t>(result.size() - 4);
  std::memcpy(result.data(), &length, 4);
  for (int r = 1; r < size_; ++r) send_result(r, result);
  return true;
}

void TcpCycleTransport::send_result(int rank, std::string_view bytes) {
  const auto deadline = std::chrono::steady_clock::now() + send_timeout_;
  while (!bytes.empty()) {
    const ssize_t n =
        ::send(plane_.peer(rank), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) gone(rank);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw StatusError(
          HVD_ERR_TIMEOUT,
          fmt::format("rank {} did not read the negotiation round's result for {} ms, though it "
                      "sent its part: it is probably frozen (stopped, or stuck in a call that "
                      "never returns)",
                      rank, send_timeout_.count()),
          "see that rank's output; HOROVOD_GLOO_TIMEOUT_SECONDS sets how long rank 0 waits");
    }
    pollfd p{plane_.peer(rank), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
  }
}

bool TcpCycleTransport::poll_member() {
  while (!outbox_.empty()) {
    const ssize_t n =
        ::send(plane_.peer(0), outbox_.data(), outbox_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      outbox_.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;  // the rest at the next poll
    } else {
      gone(0);
    }
  }
  const bool closed = read_from(0);
  const std::string m = take_message(0);
  if (m.empty()) {
    if (closed) gone(0);
    return false;
  }
  if (m.front() == static_cast<char>(Round::kFatal) && m.size() >= 5) {
    throw StatusError(static_cast<hvd_status>(get_u32(m.data() + 1)), m.substr(5));
  }
  if (m.front() != static_cast<char>(round_)) {
    lost(0, fmt::format("sent the result of another round ('{}' in a '{}' round)", m.front(),
                        static_cast<char>(round_)));
  }
  if (round_ == Round::kAnd) {
    if ((m.size() - 1) % 8 != 0) lost(0, "sent an AND result of a partial word");
    anded_.resize((m.size() - 1) / 8);
    std::memcpy(anded_.data(), m.data() + 1, m.size() - 1);
    return true;
  }
  std::size_t at = 1;
  for (auto& part : gathered_) {
    if (m.size() - at < 4 || m.size() - at - 4 < get_u32(m.data() + at)) {
      lost(0, "sent an allgather result shorter than its lengths");
    }
    const std::size_t n = get_u32(m.data() + at);
    part.assign(m, at + 4, n);
    at += 4 + n;
  }
  return true;
}

bool TcpCycleTransport::read_from(int rank) {
  std::string& inbox = inbox_[static_cast<std::size_t>(rank)];
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(plane_.peer(rank), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      inbox.append(buf, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof buf) return false;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      return true;  // closed or failed: what arrived before still counts
    }
  }
}

std::string TcpCycleTransport::take_message(int rank) {
  std::string& inbox = inbox_[static_cast<std::size_t>(rank)];
  if (inbox.size() < 4) return {};
  const std::size_t len = get_u32(inbox.data());
  if (len == 0 || len > kMaxMessage) {
    lost(rank, fmt::format("sent a negotiation message of {} bytes", len));
  }
  if (inbox.size() - 4 < len) return {};
  std::string m = inbox.substr(4, len);
  inbox.erase(0, 4 + len);
  return m;
}

void TcpCycleTransport::gone(int rank) {
  // As the control plane says it (cycle_engine_thread.cpp): whichever connection notices first.
  throw StatusError(
      HVD_ERR_PEER_LOST,
      rank == 0 ? std::string("rank 0 (the coordinator) is gone: its negotiation connection closed "
                              "(it exited, crashed, was killed or called hvd::shutdown())")
                : fmt::format("rank {} left the job without calling hvd::shutdown() (its "
                              "negotiation connection closed): it probably crashed or was killed",
                              rank));
}

void TcpCycleTransport::lost(int rank, const std::string& why) {
  throw StatusError(
      HVD_ERR_BACKEND,
      fmt::format("the engine's negotiation with rank {} failed: rank {} {}", rank, rank, why),
      "do all ranks run the same libhvd version? See every rank's output");
}

}  // namespace hvd::runtime
