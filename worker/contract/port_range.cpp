#include "worker/contract/port_range.h"

#include <charconv>

namespace hvd::contract {
namespace {

std::optional<int> port(std::string_view part) {
  int out = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
  if (part.empty() || ec != std::errc() || end != part.data() + part.size() || out < 1 ||
      out > 65535) {
    return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<std::pair<int, int>> parse_port_range(std::string_view text) {
  const auto dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto low = port(text.substr(0, dash));
  const auto high = port(text.substr(dash + 1));
  if (!low || !high || *low > *high) return std::nullopt;
  return std::pair{*low, *high};
}

}  // namespace hvd::contract
