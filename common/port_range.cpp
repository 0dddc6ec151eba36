#include "common/port_range.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace hvd {
namespace {

std::optional<int> port_number(std::string_view part) {
  int out = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
  if (part.empty() || ec != std::errc() || end != part.data() + part.size() || out < 1 ||
      out > 65535) {
    return std::nullopt;
  }
  return out;
}

}  // namespace

std::string PortRange::text() const { return std::to_string(low) + "-" + std::to_string(high); }

std::optional<PortRange> parse_port_range(std::string_view text) {
  const auto dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto low = port_number(text.substr(0, dash));
  const auto high = port_number(text.substr(dash + 1));
  if (!low || !high || *low > *high) return std::nullopt;
  return PortRange{*low, *high};
}

BindOutcome bind_first_free(const PortRange& range, const BindFn& try_bind, int avoid) {
  BindOutcome out;
  for (int port = range.low; port <= range.high; ++port) {
    if (!range.any() && port == avoid) continue;
    const BindAttempt attempt = try_bind(port);
    if (attempt.error == 0 && attempt.port > 0) return {attempt.port, 0};
    out.error = attempt.error != 0 ? attempt.error : EADDRNOTAVAIL;
    if (out.error != EADDRINUSE) break;
  }
  return out;
}

BindFailure bind_failure(const PortRange& range, const BindOutcome& outcome,
                         std::string_view label, std::string_view what, std::string_view address) {
  const std::string range_text = std::string(label) + range.text();
  if (!range.any() && (outcome.error == EADDRINUSE || outcome.error == 0)) {
    return {"every port of " + range_text + " is in use on " + std::string(address) + " (" +
                std::string(what) + ")",
            "widen the range: hvdrun needs one port on the launcher (the rendezvous server), one "
            "per host (its network probes; rank 0's host hands it to the job as MASTER_PORT) and "
            "one more on rank 0's host for libhvd's control plane"};
  }
  BindFailure f;
  f.message = std::string(what) + " cannot listen on " + std::string(address) +
              (range.any() ? std::string() : " in " + range_text) + ": " +
              std::strerror(outcome.error);
  if (outcome.error == EACCES) {
    f.hint = "ports below 1024 need root: pick a range above 1023";
  } else if (outcome.error == EADDRNOTAVAIL) {
    f.hint = "check that this address belongs to this machine";
  }
  return f;
}

}  // namespace hvd
