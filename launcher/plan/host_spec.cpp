#include "launcher/plan/host_spec.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "common/error.h"
#include "common/fd_io.h"

namespace hvd::launcher {
namespace {

constexpr std::string_view kHostFileLine = "a hostfile line is: host slots=N [port=P] [user=U]";

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool is_ipv6_address(std::string_view text) {
  const std::string address(text.substr(0, text.find('%')));  // without a %zone
  in6_addr out{};
  return inet_pton(AF_INET6, address.c_str(), &out) == 1;
}

// Host names and addresses end up in ssh and mpirun command lines: only plain characters, and
// never a leading '-' (it would read as an option).
void validate_host(std::string_view host, bool bracketed, const std::string& where) {
  if (host.empty()) {
    throw UsageError(fmt::format("{}: the host name is empty", where),
                     "write a host name or address, e.g. 10.0.0.1:2");
  }
  // DNS's limit; libssh, OpenSSH and mpirun would refuse a longer name later, less clearly.
  constexpr size_t kMaxHostName = 253;
  if (host.size() > kMaxHostName) {
    throw UsageError(fmt::format("{}: host '{}...' is {} characters long", where,
                                 host.substr(0, 32), host.size()),
                     fmt::format("a host name has at most {} characters", kMaxHostName));
  }
  if (host.front() == '-') {
    throw UsageError(fmt::format("{}: host '{}' starts with '-'", where, host),
                     "a host name cannot start with '-'");
  }
  // An IPv6 address: hex digits, ':' and '.', then optionally %zone (an interface name).
  const size_t zone = bracketed ? host.find('%') : std::string_view::npos;
  for (size_t i = 0; i < host.size(); ++i) {
    const char c = host[i];
    const bool ok = !bracketed || i > zone ? is_name_char(c)
                                           : std::isxdigit(static_cast<unsigned char>(c)) ||
                                                 c == ':' || c == '.' || i == zone;
    if (!ok) {
      throw UsageError(fmt::format("{}: host '{}' contains '{}'", where, host, c),
                       bracketed
                           ? "an IPv6 address has hex digits, ':' and '.', e.g. [fe80::1]:2"
                           : "host names and addresses contain letters, digits, '.', '-' and '_'");
    }
  }
  // Brackets are for IPv6 only: "[fe81%eth0]" or "[1:2]" would be accepted, then written back
  // without brackets (format_host) where no parser reads them again.
  if (bracketed && !is_ipv6_address(host)) {
    throw UsageError(fmt::format("{}: '{}' is not an IPv6 address", where, host),
                     "brackets hold an IPv6 address, e.g. [fe80::1%eth0]:2; write a host name "
                     "or an IPv4 address without them");
  }
}

// `entry` has two colons or more and no brackets: offer only the readings that are valid, an
// address with a slot count after the last ':' (::1:2) and the whole entry as one address.
std::string bracket_hint(std::string_view entry) {
  const auto last = entry.rfind(':');
  const std::string_view address = entry.substr(0, last);
  const std::string_view slots = entry.substr(last + 1);
  const bool slots_reading = is_ipv6_address(address) && !slots.empty() &&
                             std::all_of(slots.begin(), slots.end(), [](char c) {
                               return std::isdigit(static_cast<unsigned char>(c));
                             });
  const bool address_reading = is_ipv6_address(entry);
  if (slots_reading && address_reading) {
    return fmt::format("write [{}]:{} if {} is the slot count, or [{}] for that address", address,
                       slots, slots, entry);
  }
  if (slots_reading) return fmt::format("write [{}]:{}", address, slots);
  if (address_reading) {
    return fmt::format("write [{}] for 1 slot, or [{}]:N for N slots", entry, entry);
  }
  return "write an IPv6 address in brackets, [address] or [address]:slots, e.g. [fe80::1]:2";
}

void validate_user(std::string_view user, const std::string& where) {
  if (user.empty()) {
    throw UsageError(fmt::format("{}: the user name before '@' is empty", where),
                     "write user@host, or drop the '@'");
  }
  const bool ok = user.front() != '-' && std::all_of(user.begin(), user.end(), is_name_char);
  if (!ok) {
    throw UsageError(fmt::format("{}: user '{}' is not a valid user name", where, user),
                     "user names contain letters, digits, '.', '-' and '_' and do not start "
                     "with '-'");
  }
}

// Parses a non-negative decimal integer; nullopt if `text` is anything else.
std::optional<long> parse_number(std::string_view text) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

int parse_slots(std::string_view text, std::string_view host, const std::string& where,
                bool in_hostfile) {
  const auto value = parse_number(text);
  if (!value) {
    throw UsageError(fmt::format("{}: slots '{}' is not a number", where, text),
                     in_hostfile ? std::string(kHostFileLine)
                                 : "write host:slots with slots a positive integer, e.g. a:2");
  }
  if (*value == 0) {
    throw UsageError(fmt::format("{}: a host needs at least 1 slot", where),
                     "drop the host from the list or give it 1 or more slots");
  }
  if (*value > kMaxSlotsPerHost) {
    throw UsageError(
        fmt::format("{}: {} slots is more than {} on one host", where, *value, kMaxSlotsPerHost),
        in_hostfile
            ? std::string("is it a port? write port=N")
            : fmt::format("{} slots: a port? -H reads host:N as N slots; use -p {} for every "
                          "host, or a hostfile line '{} slots=1 port={}'",
                          *value, *value, host, *value));
  }
  return static_cast<int>(*value);
}

int parse_port(std::string_view text, const std::string& where) {
  const auto value = parse_number(text);
  if (!value || *value < 1 || *value > 65535) {
    throw UsageError(fmt::format("{}: port '{}' is not a port number (1-65535)", where, text),
                     std::string(kHostFileLine));
  }
  return static_cast<int>(*value);
}

// Splits "user@rest" (the user part optional) and validates the user.
std::string_view take_user(std::string_view text, HostSpec& spec, const std::string& where) {
  const auto at = text.find('@');
  if (at == std::string_view::npos) return text;
  const std::string_view user = text.substr(0, at);
  validate_user(user, where);
  spec.user = std::string(user);
  return text.substr(at + 1);
}

// Linear: a hostfile of 200,000 lines is checked by a hash lookup each, not pair by pair.
void reject_duplicates(const std::vector<HostSpec>& hosts) {
  std::unordered_map<std::string, size_t> first;  // "port host" -> its first entry
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string key =
        fmt::format("{} {}", hosts[i].port ? std::to_string(*hosts[i].port) : "-", hosts[i].host);
    const auto [at, fresh] = first.emplace(key, i);
    if (fresh) continue;
    const HostSpec& earlier = hosts[at->second];
    throw UsageError(fmt::format("{}: host '{}' is listed again (first at {})", hosts[i].origin,
                                 hosts[i].host, earlier.origin),
                     fmt::format("list each host once with all its slots, e.g. {}:{}",
                                 format_host(hosts[i].host), hosts[i].slots + earlier.slots));
  }
}

HostSpec parse_host_entry(std::string_view entry, int index, bool last) {
  // horovodrun strips the spaces around an entry: -H 'a:2, b:2' is two hosts.
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) {
    entry.remove_prefix(1);
  }
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) {
    entry.remove_suffix(1);
  }
  const std::string where = fmt::format("-H entry {} '{}'", index, entry);
  HostSpec spec;
  spec.origin = fmt::format("-H entry {}", index);
  if (entry.empty()) {
    const char* comma = index == 1 ? "leading" : last ? "trailing" : "doubled";
    throw UsageError(fmt::format("-H entry {} is empty (a {} comma?)", index, comma),
                     "write hosts as host[:slots] separated by single commas, e.g. a:2,b:2");
  }
  if (std::any_of(entry.begin(), entry.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    throw UsageError(fmt::format("{} contains a space", where),
                     "separate hosts with commas, not spaces: -H a:2,b:2");
  }
  std::string_view rest = take_user(entry, spec, where);
  std::string_view slots_text;
  bool has_slots = false;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) {
      throw UsageError(fmt::format("{}: '[' without a closing ']'", where),
                       "write an IPv6 address as [address] or [address]:slots");
    }
    spec.host = std::string(rest.substr(1, close - 1));
    validate_host(spec.host, true, where);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        throw UsageError(fmt::format("{}: unexpected '{}' after ']'", where, after),
                         "write [address]:slots");
      }
      slots_text = after.substr(1);
      has_slots = true;
    }
  } else {
    const auto colons = std::count(rest.begin(), rest.end(), ':');
    if (colons > 1) {
      throw UsageError(fmt::format("{}: an IPv6 address needs brackets", where),
                       bracket_hint(rest));
    }
    const auto colon = rest.find(':');
    spec.host = std::string(rest.substr(0, colon));
    validate_host(spec.host, false, where);
    if (colon != std::string_view::npos) {
      slots_text = rest.substr(colon + 1);
      has_slots = true;
    }
  }
  if (has_slots) spec.slots = parse_slots(slots_text, format_host(spec.host), where, false);
  return spec;
}

struct Token {
  std::string_view text;
  size_t column;  // 1-based
};

std::vector<Token> split_words(std::string_view line) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) tokens.push_back({line.substr(start, i - start), start + 1});
  }
  return tokens;
}

HostSpec parse_hostfile_line(const std::vector<Token>& tokens, std::string_view file, int line) {
  auto where = [&](const Token& t) { return fmt::format("{}:{}:{}", file, line, t.column); };
  HostSpec spec;
  spec.origin = fmt::format("{}:{}", file, line);

  const Token& first = tokens.front();
  std::string_view host = take_user(first.text, spec, where(first));
  bool bracketed = false;
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    bracketed = true;
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    const auto colon = host.find(':');
    throw UsageError(fmt::format("{}: '{}' looks like host:slots", where(first), host),
                     fmt::format("in a hostfile write '{} slots={}'", host.substr(0, colon),
                                 host.substr(colon + 1)));
  } else if (host.find(':') != std::string_view::npos) {
    bracketed = true;  // a bare IPv6 address is unambiguous on a hostfile line
  }
  validate_host(host, bracketed, where(first));
  spec.host = std::string(host);

  std::vector<std::string_view> seen;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    const auto eq = t.text.find('=');
    const std::string_view key = t.text.substr(0, eq);
    if (eq == std::string_view::npos ||
        (key != "slots" && key != "port" && key != "user" && key != "max_slots")) {
      throw UsageError(fmt::format("{}: unknown setting '{}'", where(t), t.text),
                       std::string(kHostFileLine));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw UsageError(fmt::format("{}: '{}' is given twice on this line", where(t), key),
                       std::string(kHostFileLine));
    }
    seen.push_back(key);
    const std::string_view value = t.text.substr(eq + 1);
    if (key == "slots") {
      spec.slots = parse_slots(value, format_host(spec.host), where(t), true);
    } else if (key == "port") {
      spec.port = parse_port(value, where(t));
    } else if (key == "user") {
      if (spec.user) {
        throw UsageError(fmt::format("{}: the user is given twice (user@ and user=)", where(t)),
                         "keep one of them");
      }
      validate_user(value, where(t));
      spec.user = std::string(value);
    }
    // max_slots= is accepted for Open MPI hostfile compatibility and ignored.
  }
  return spec;
}

}  // namespace

void validate_listed_host(std::string_view host, const std::string& where) {
  validate_host(host, is_ipv6_address(host), where);
}

std::string format_host(std::string_view host) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]", host);
  return std::string(host);
}

std::vector<HostSpec> parse_host_list(std::string_view text) {
  if (text.empty()) {
    throw UsageError("-H: the host list is empty",
                     "give hosts as host[:slots],... e.g. -H 10.0.0.1:2,10.0.0.2:2");
  }
  std::vector<HostSpec> hosts;
  size_t start = 0;
  int index = 1;
  while (true) {
    const auto comma = text.find(',', start);
    hosts.push_back(parse_host_entry(text.substr(start, comma - start), index++,
                                     comma == std::string_view::npos));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  reject_duplicates(hosts);
  return hosts;
}

std::vector<HostSpec> parse_hostfile(std::string_view text, std::string_view file_name) {
  std::vector<HostSpec> hosts;
  int line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const auto newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline - start);
    ++line_no;
    line = line.substr(0, line.find('#'));
    const auto tokens = split_words(line);
    if (!tokens.empty()) hosts.push_back(parse_hostfile_line(tokens, file_name, line_no));
    if (newline == std::string_view::npos) break;
    start = newline + 1;
  }
  if (hosts.empty()) {
    throw UsageError(fmt::format("{}: no hosts in this hostfile", file_name),
                     std::string(kHostFileLine));
  }
  reject_duplicates(hosts);
  return hosts;
}

std::vector<HostSpec> read_hostfile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError(fmt::format("--hostfile {}: is a directory", path),
                     "give the hostfile itself; it has lines 'host slots=N'");
  }
  return parse_hostfile(read_user_file("--hostfile", path, kMaxHostfileBytes,
                                       "a hostfile has one line 'host slots=N' per host"),
                        path);
}

}  // namespace hvd::launcher
