// Choosing each host's address by CIDR or interface name (launcher/plan/network_choice.h), and how
// the choice reaches the plan and Open MPI's command line.
#include "tests/support/catch.h"

#include "launcher/mpirun/mpi_command.h"
#include "launcher/native/agent_conn.h"
#include "launcher/plan/network_choice.h"
#include "launcher/plan/plan.h"
#include "tests/unit/test_helpers.h"

using hvd::agent::NetInterface;
using hvd::launcher::choose_address;
using hvd::launcher::NetworkChoice;
using hvd::launcher::parse_cidr;
using hvd::launcher::parse_interface_list;

namespace {

NetInterface iface(std::string name, std::vector<std::string> ipv4, bool up = true,
                   bool loopback = false, bool is_virtual = false) {
  NetInterface n;
  n.name = std::move(name);
  n.ipv4 = std::move(ipv4);
  n.up = up;
  n.loopback = loopback;
  n.is_virtual = is_virtual;
  return n;
}

}  // namespace

TEST_CASE("network: CIDRs parse strictly and match their addresses", "[network]") {
  const auto c = parse_cidr("10.1.0.0/16");
  CHECK(c.contains("10.1.200.3"));
  CHECK_FALSE(c.contains("10.2.0.1"));
  CHECK_FALSE(c.contains("not an address"));
  CHECK(parse_cidr("10.1.2.3/16").contains("10.1.0.9"));  // host bits are masked off
  CHECK(parse_cidr("0.0.0.0/0").contains("192.0.2.1"));
  CHECK(parse_cidr("127.0.0.1/32").contains("127.0.0.1"));
  CHECK_FALSE(parse_cidr("127.0.0.1/32").contains("127.0.0.2"));
  for (const char* bad : {"10.0.0.0", "10.0.0.0/33", "10.0.0/8", "fe80::/10", "10.0.0.0/x", ""}) {
    INFO(bad);
    hvd::test::require_usage_error([&] { parse_cidr(bad); }, "not an IPv4 CIDR");
  }
}

TEST_CASE("network: interface lists parse strictly", "[network]") {
  CHECK(parse_interface_list("eth1,ib0") == std::vector<std::string>{"eth1", "ib0"});
  CHECK(parse_interface_list("enp0s31f6") == std::vector<std::string>{"enp0s31f6"});
  hvd::test::require_usage_error([] { parse_interface_list("eth1,,ib0"); }, "is not an interface");
  hvd::test::require_usage_error([] { parse_interface_list("eth 1"); }, "is not an interface");
  hvd::test::require_usage_error([] { parse_interface_list("averyveryverylongname0"); },
                                 "is not an interface");
}

TEST_CASE("network: a CIDR picks each host's address whatever its NIC is called", "[network]") {
  NetworkChoice choice;
  choice.cidr = parse_cidr("10.9.0.0/16");
  const auto a = choose_address(
      choice,
      {iface("lo", {"127.0.0.1"}, true, true), iface("docker0", {"172.17.0.1"}, true, false, true),
       iface("eth0", {"192.0.2.7"}), iface("ens5", {"10.9.3.4"})},
      "h1");
  CHECK(a.address == "10.9.3.4");
  CHECK(a.interface == "ens5");
  const auto b = choose_address(choice, {iface("ib0", {"10.9.7.1"})}, "h2");
  CHECK(b.interface == "ib0");  // another name on another host: same network
  // A down interface and a link-local address are never chosen.
  NetworkChoice any;
  any.cidr = parse_cidr("0.0.0.0/0");
  CHECK(choose_address(
            any, {iface("eth9", {"10.0.0.1"}, false), iface("eth1", {"169.254.3.3", "10.0.0.2"})},
            "h3")
            .address == "10.0.0.2");
}

TEST_CASE("network: --network-interface takes the first listed name the host has", "[network]") {
  NetworkChoice choice;
  choice.interfaces = {"eth1", "ens5"};
  CHECK(choose_address(choice, {iface("ens5", {"10.1.0.2"}), iface("eth1", {"10.2.0.2"})}, "h")
            .interface == "eth1");
  CHECK(choose_address(choice, {iface("ens5", {"10.1.0.2"})}, "h").address == "10.1.0.2");
  // Named explicitly, a virtual interface is fine.
  choice.interfaces = {"br0"};
  CHECK(choose_address(choice, {iface("br0", {"10.3.0.1"}, true, false, true)}, "h").address ==
        "10.3.0.1");
}

TEST_CASE("network: no match names the host, the request and the host's interfaces", "[network]") {
  NetworkChoice choice;
  choice.cidr = parse_cidr("10.254.0.0/16");
  try {
    choose_address(choice, {iface("lo", {"127.0.0.1"}, true, true), iface("eth0", {"10.0.0.5"})},
                   "worker7");
    FAIL("no error");
  } catch (const hvd::Error& e) {
    CHECK(std::string(e.what()) ==
          "--network-cidr 10.254.0.0/16: host worker7 has no address in it (its interfaces: lo "
          "127.0.0.1 (up, loopback); eth0 10.0.0.5 (up))");
  }
  NetworkChoice names;
  names.interfaces = {"ib0"};
  try {
    choose_address(names, {iface("ib0", {}, true)}, "worker8");
    FAIL("no error");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring(
                             "--network-interface ib0: host worker8 has none"));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("ib0 no IPv4 (up)"));
  }
}

TEST_CASE("network: the plan defers the chosen address, Open MPI gets the CIDR", "[network]") {
  hvd::launcher::PlanRequest r;
  r.hosts = hvd::launcher::parse_host_list("127.0.0.2,127.0.0.3");
  r.default_user = "root";
  r.command = {"./train"};
  r.network.cidr = parse_cidr("127.0.0.0/8");
  const auto plan =
      hvd::launcher::make_plan(r, hvd::launcher::LocalIdentity{"box", {"127.0.0.1"}}, {});
  bool advertise = false, ifname = false;
  for (const auto& e : plan.ranks[1].env) {
    if (e.name == "HVD_ADVERTISE_ADDR") advertise = e.deferred.has_value();
    if (e.name == "NCCL_SOCKET_IFNAME") ifname = e.deferred.has_value();
  }
  CHECK(advertise);
  CHECK(ifname);
  hvd::launcher::MpiCommandInput in;
  in.host_addresses = {"127.0.0.2", "127.0.0.3"};
  const auto argv = hvd::launcher::mpirun_argv(plan, in);
  const auto at = std::find(argv.begin(), argv.end(), "btl_tcp_if_include");
  REQUIRE(at != argv.end());
  CHECK(*(at + 1) == "127.0.0.0/8");
}

TEST_CASE("parse_hello reads the interfaces, and a mistyped field is not an agent", "[network]") {
  const auto hello = hvd::launcher::parse_hello(
      R"({"protocol": 2, "version": "x", "hostname": "h", "boot_id": "b",
          "ssh_connection": "10.0.0.1 5 10.0.0.2 22",
          "interfaces": [{"name": "ens5", "ipv4": ["10.0.0.2"], "ipv6": [], "up": true,
                          "loopback": false, "virtual": false}, 7]})");
  CHECK(hello.protocol == 2);
  CHECK(hello.ssh_connection == "10.0.0.1 5 10.0.0.2 22");
  REQUIRE(hello.interfaces.size() == 1);
  CHECK(hello.interfaces[0].name == "ens5");
  CHECK(hello.interfaces[0].ipv4 == std::vector<std::string>{"10.0.0.2"});
  CHECK(hello.interfaces[0].up);
  // A peer that sends an address list as a number is not a compatible agent: protocol 0.
  CHECK(hvd::launcher::parse_hello(R"({"protocol": 2, "interfaces": [{"ipv4": 5}]})").protocol ==
        0);
  CHECK(hvd::launcher::parse_hello("not json").protocol == 0);
}

// tests/fuzz/regressions/hello/protocol-float-out-of-int-range: a protocol that is not an integer
// of int's range (a float out of range was undefined behaviour) is not an agent of this version.
TEST_CASE("parse_hello: the protocol is an integer or the peer is not an agent", "[network]") {
  using hvd::launcher::parse_hello;
  CHECK(parse_hello(R"({"protocol": 1e300, "version": "0.1.0"})").protocol == 0);
  CHECK(parse_hello(R"({"protocol": 5.0})").protocol == 0);
  CHECK(parse_hello(R"({"protocol": true})").protocol == 0);
  CHECK(parse_hello(R"({"protocol": 4294967296})").protocol == 0);
  CHECK(parse_hello(R"({"protocol": 7})").protocol == 7);
  CHECK(parse_hello(R"({"version": "0.1.0"})").protocol == -1);
}
