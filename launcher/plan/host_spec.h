// Host lists: `-H a:2,user@b:2,[fe80::1]:1` and hostfiles (`host slots=N [port=P] [user=U]`).
//
// Parsing is pure: text in, HostSpecs or a UsageError out. Every error names the input it came
// from (`-H entry 2 'b:x'`, `hosts.txt:3:7`) and says what to do.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::launcher {

// More slots than this on one host is almost always a port written as host:port.
inline constexpr int kMaxSlotsPerHost = 1024;

struct HostSpec {
  std::string host;  // name, IPv4 address or IPv6 address (without brackets)
  int slots = 1;
  std::optional<int> port;          // only from a hostfile (or, later, the ssh config)
  std::optional<std::string> user;  // `user@host` or `user=`
  std::string origin;               // where it was written, for messages: "-H entry 2", "f:3"

  bool operator==(const HostSpec&) const = default;
};

// Parses the value of -H/--hosts. Throws UsageError.
std::vector<HostSpec> parse_host_list(std::string_view text);

// Parses hostfile contents; `file_name` is used in messages only. Throws UsageError.
std::vector<HostSpec> parse_hostfile(std::string_view text, std::string_view file_name);

// The largest hostfile read (4 MiB: some 100,000 hosts); a bigger one is a usage error naming
// the file and the bound, before any parsing.
inline constexpr size_t kMaxHostfileBytes = 4 << 20;

// A host name or address from a list hvdrun did not parse itself (a scheduler's node list): the
// checks -H entries get (plain characters only, no leading '-', at most 253 characters; a bare
// IPv6 address is taken as one). Throws UsageError naming `where`.
void validate_listed_host(std::string_view host, const std::string& where);

// Reads and parses a hostfile. Throws UsageError (unreadable file, over kMaxHostfileBytes, or bad
// contents).
std::vector<HostSpec> read_hostfile(const std::string& path);

// `host` as it is written in an address position: IPv6 in brackets, others as they are.
std::string format_host(std::string_view host);

}  // namespace hvd::launcher
