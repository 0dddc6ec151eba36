#include "contract/rendezvous.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace hvd::contract::rendezvous {
namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

}  // namespace

ScopeRound scope_round(std::string_view scope) {
  const size_t dot = scope.rfind(".r");
  if (dot == std::string_view::npos || dot == 0) return {std::string(scope), 0};
  const std::string_view digits = scope.substr(dot + 2);
  long round = 0;
  // Decimal without a sign or leading zero, at least 1 and at most 9 digits ("x.r0" and
  // "x.r007" are names of their own).
  const bool decimal =
      !digits.empty() && digits.size() <= 9 && digits[0] != '0' &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!decimal) return {std::string(scope), 0};
  std::from_chars(digits.data(), digits.data() + digits.size(), round);
  return {std::string(scope.substr(0, dot)), round};
}

std::string bearer(std::string_view token) { return "Bearer " + std::string(token); }

bool valid_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxName &&
         std::all_of(name.begin(), name.end(), name_char);
}

std::string encode_key(std::string_view key) {
  if (!key.empty() && std::all_of(key.begin(), key.end(), name_char)) return std::string(key);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "x-";
  for (unsigned char c : key) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string key_path(std::string_view scope, std::string_view key) {
  return "/" + std::string(scope) + "/" + encode_key(key);
}

std::string join_address(std::string_view host, int port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  return (v6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + std::to_string(port);
}

std::optional<std::pair<std::string, int>> split_address(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view digits = address.substr(colon + 1);
  int port = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (host.empty() || digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
      port < 1 || port > 65535) {
    return std::nullopt;
  }
  return std::pair{std::string(host), port};
}

}  // namespace hvd::contract::rendezvous
