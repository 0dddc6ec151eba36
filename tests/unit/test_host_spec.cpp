#include <filesystem>
#include <fstream>
#include "tests/support/catch.h"

#include "launcher/plan/host_spec.h"
#include "test_helpers.h"

using hvd::launcher::format_host;
using hvd::launcher::HostSpec;
using hvd::launcher::parse_host_list;
using hvd::launcher::parse_hostfile;
using hvd::launcher::read_hostfile;
using hvd::test::require_usage_error;

TEST_CASE("host list: plain hosts with slots and users and IPv6", "[hosts]") {
  const auto hosts = parse_host_list("a,b:2,alice@10.0.0.3:4,[::1]:2,[fe80::1%eth0],bob@[::2]");
  REQUIRE(hosts.size() == 6);
  CHECK(hosts[0] == HostSpec{"a", 1, std::nullopt, std::nullopt, "-H entry 1"});
  CHECK(hosts[1] == HostSpec{"b", 2, std::nullopt, std::nullopt, "-H entry 2"});
  CHECK(hosts[2] == HostSpec{"10.0.0.3", 4, std::nullopt, "alice", "-H entry 3"});
  CHECK(hosts[3] == HostSpec{"::1", 2, std::nullopt, std::nullopt, "-H entry 4"});
  CHECK(hosts[4].host == "fe80::1%eth0");
  CHECK(hosts[4].slots == 1);
  CHECK(hosts[5].host == "::2");
  CHECK(hosts[5].user == "bob");
}

// horovodrun strips the spaces around an entry (Horovod's test_run.py host parsing).
TEST_CASE("host list: spaces around an entry are stripped, '_' is a name character", "[hosts]") {
  const auto hosts = parse_host_list(" a:2, worker_1:1 ");
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].host == "a");
  CHECK(hosts[1].host == "worker_1");
  CHECK(hosts[1].slots == 1);
}

TEST_CASE("host list: the largest slot count is accepted", "[hosts]") {
  CHECK(parse_host_list("a:1024")[0].slots == 1024);
}

TEST_CASE("host list errors say which entry and what to do", "[hosts]") {
  require_usage_error([] { parse_host_list(""); }, "-H: the host list is empty", "-H 10.0.0.1:2");
  require_usage_error([] { parse_host_list(",a"); }, "-H entry 1 is empty (a leading comma?)");
  require_usage_error([] { parse_host_list("a:2,,b"); }, "-H entry 2 is empty (a doubled comma?)",
                      "single commas");
  require_usage_error([] { parse_host_list("a,"); }, "-H entry 2 is empty (a trailing comma?)");
  require_usage_error([] { parse_host_list("a:2 b:2"); }, "-H entry 1 'a:2 b:2' contains a space",
                      "-H a:2,b:2");
  require_usage_error([] { parse_host_list("a:x"); }, "-H entry 1 'a:x': slots 'x' is not a number",
                      "e.g. a:2");
  require_usage_error([] { parse_host_list("a:"); }, "slots '' is not a number");
  require_usage_error([] { parse_host_list("a:-1"); }, "slots '-1' is not a number");
  require_usage_error([] { parse_host_list("b,a:0"); },
                      "-H entry 2 'a:0': a host needs at least 1 slot", "drop the host");
  require_usage_error([] { parse_host_list("h:2222"); }, "2222 slots is more than 1024",
                      "2222 slots: a port?");
  require_usage_error([] { parse_host_list("h:2222"); }, "h:2222", "-p 2222");
  require_usage_error([] { parse_host_list("h:2222"); }, "h", "'h slots=1 port=2222'");
  require_usage_error([] { parse_host_list("::1:2"); }, "an IPv6 address needs brackets",
                      "write [::1]:2 if 2 is the slot count, or [::1:2] for that address");
  // Only valid forms: fe80: is no address, so 1 cannot be the slot count.
  require_usage_error([] { parse_host_list("fe80::1"); }, "an IPv6 address needs brackets",
                      "write [fe80::1] for 1 slot, or [fe80::1]:N for N slots");
  require_usage_error([] { parse_host_list("fe80::1%eth0"); }, "needs brackets",
                      "write [fe80::1%eth0] for 1 slot");
  require_usage_error([] { parse_host_list("::ffff:1.2.3.4:2"); }, "needs brackets",
                      "write [::ffff:1.2.3.4]:2");
  require_usage_error([] { parse_host_list("g::h"); }, "needs brackets",
                      "[address] or [address]:slots, e.g. [fe80::1]:2");
  require_usage_error([] { parse_host_list("[::1:2"); }, "'[' without a closing ']'");
  require_usage_error([] { parse_host_list("[::1]x"); }, "unexpected 'x' after ']'");
  require_usage_error([] { parse_host_list("a;rm -rf"); }, "contains a space");
  require_usage_error([] { parse_host_list("a;b"); }, "host 'a;b' contains ';'", "letters, digits");
  require_usage_error([] { parse_host_list("-oProxyCommand=x"); }, "starts with '-'");
  require_usage_error([] { parse_host_list(std::string(300, 'a') + ":2"); },
                      "is 300 characters long", "at most 253");
  require_usage_error([] { parse_host_list("h\xc3\xb6st:2"); }, "contains");
  require_usage_error([] { parse_host_list(":2"); }, "the host name is empty");
  require_usage_error([] { parse_host_list("@a"); }, "the user name before '@' is empty");
  require_usage_error([] { parse_host_list("a$b@h"); }, "user 'a$b' is not a valid user name");
  require_usage_error([] { parse_host_list("[g::1]"); }, "contains 'g'");
  require_usage_error([] { parse_host_list("a:1,b,a:2"); },
                      "-H entry 3: host 'a' is listed again (first at -H entry 1)", "e.g. a:3");
}

TEST_CASE("hostfile: comments, blank lines, settings", "[hostfile]") {
  const auto hosts = parse_hostfile(
      "# cluster\n"
      "\n"
      "10.0.0.1 slots=2   # first\n"
      "  10.0.0.2\tslots=4 port=2222 user=alice max_slots=8\r\n"
      "bob@node3 slots=1\n"
      "fe80::1 slots=2\n"
      "[::1] port=12345\n",
      "hosts.txt");
  REQUIRE(hosts.size() == 5);
  CHECK(hosts[0] == HostSpec{"10.0.0.1", 2, std::nullopt, std::nullopt, "hosts.txt:3"});
  CHECK(hosts[1] == HostSpec{"10.0.0.2", 4, 2222, "alice", "hosts.txt:4"});
  CHECK(hosts[2] == HostSpec{"node3", 1, std::nullopt, "bob", "hosts.txt:5"});
  CHECK(hosts[3].host == "fe80::1");
  CHECK(hosts[4] == HostSpec{"::1", 1, 12345, std::nullopt, "hosts.txt:7"});
}

TEST_CASE("hostfile: the same address on two ports is two hosts", "[hostfile]") {
  const auto hosts = parse_hostfile("h port=2201\nh port=2202\n", "f");
  CHECK(hosts.size() == 2);
}

TEST_CASE("hostfile errors point at FILE:LINE:COL", "[hostfile]") {
  require_usage_error([] { parse_hostfile("a slots=2\nb  slot=2\n", "hf"); },
                      "hf:2:4: unknown setting 'slot=2'", "host slots=N [port=P] [user=U]");
  require_usage_error([] { parse_hostfile("b slots\n", "hf"); }, "hf:1:3: unknown setting 'slots'");
  require_usage_error([] { parse_hostfile("a:2\n", "hf"); }, "hf:1:1: 'a:2' looks like host:slots",
                      "'a slots=2'");
  require_usage_error([] { parse_hostfile("a slots=x\n", "hf"); },
                      "hf:1:3: slots 'x' is not a number", "host slots=N");
  require_usage_error([] { parse_hostfile("a slots=0\n", "hf"); },
                      "hf:1:3: a host needs at least 1 slot");
  require_usage_error([] { parse_hostfile("a slots=5000\n", "hf"); },
                      "5000 slots is more than 1024", "port=N");
  require_usage_error([] { parse_hostfile("a port=0\n", "hf"); },
                      "hf:1:3: port '0' is not a port number");
  require_usage_error([] { parse_hostfile("a port=65536\n", "hf"); }, "port '65536'");
  require_usage_error([] { parse_hostfile("a slots=1 slots=2\n", "hf"); },
                      "hf:1:11: 'slots' is given twice");
  require_usage_error([] { parse_hostfile("u@a user=v\n", "hf"); }, "the user is given twice");
  require_usage_error([] { parse_hostfile("a user=-x\n", "hf"); }, "user '-x' is not a valid");
  require_usage_error([] { parse_hostfile("a;b\n", "hf"); }, "hf:1:1: host 'a;b' contains ';'");
  require_usage_error([] { parse_hostfile("a\n# x\nb\na slots=3\n", "hf"); },
                      "hf:4: host 'a' is listed again (first at hf:1)");
  require_usage_error([] { parse_hostfile("# only a comment\n\n", "hf"); }, "hf: no hosts");
  require_usage_error([] { parse_hostfile("", "hf"); }, "hf: no hosts");
}

TEST_CASE("hostfile: read from disk, or a clear error", "[hostfile]") {
  const auto path = std::filesystem::temp_directory_path() / "hvd_unit_hostfile.txt";
  {
    std::ofstream out(path);
    out << "127.0.0.2 slots=2\n127.0.0.3 slots=1\n";
  }
  const auto hosts = read_hostfile(path.string());
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0].origin == path.string() + ":1");
  std::filesystem::remove(path);
  require_usage_error([&] { read_hostfile(path.parent_path().string()); }, "is a directory");
  require_usage_error([&] { read_hostfile(path.string()); },
                      "--hostfile " + path.string() + ": cannot read it: No such file",
                      "check the path");
}

TEST_CASE("format_host brackets IPv6 only", "[hosts]") {
  CHECK(format_host("a") == "a");
  CHECK(format_host("10.0.0.1") == "10.0.0.1");
  CHECK(format_host("::1") == "[::1]");
}

// Found by tests/fuzz/host_list (regressions/host_list/bracketed-non-ipv6-with-zone): brackets
// took any hex-and-colon text, which format_host() then wrote back without brackets, where -H
// refuses it.
TEST_CASE("brackets hold an IPv6 address, nothing else", "[hosts][hostfile]") {
  require_usage_error([] { parse_host_list("[fe81%eth0]:2"); },
                      "-H entry 1 '[fe81%eth0]:2': 'fe81%eth0' is not an IPv6 address",
                      "e.g. [fe80::1%eth0]:2");
  require_usage_error([] { parse_host_list("[1:2]"); }, "'1:2' is not an IPv6 address");
  require_usage_error([] { parse_host_list("[abc]"); }, "'abc' is not an IPv6 address");
  require_usage_error([] { parse_hostfile("a:b:c slots=1\n", "h.txt"); },
                      "h.txt:1:1: 'a:b:c' is not an IPv6 address");
  CHECK(parse_host_list("[fe80::1%eth0]:2")[0].host == "fe80::1%eth0");
  CHECK(parse_hostfile("fe80::1%eth0 slots=2\n", "h.txt")[0].host == "fe80::1%eth0");
}
