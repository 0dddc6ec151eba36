// The sshd test hosts as C++ tests see them (tests/sshd/README.md).
//
// ctest starts the hosts as the `sshd_hosts` fixture and passes HVDTEST_SSHD_DIR to every test
// registered with hvd_add_ssh_tests() (tests/CMakeLists.txt); load() reads DIR/hosts.env.
#pragma once

#include <string>
#include <vector>

namespace hvd::test {

struct TestHosts {
  std::string dir;
  int port = 0;
  std::string user;
  std::vector<std::string> addresses;  // 127.0.0.2, 127.0.0.3, ...
  std::string key;                     // client private key
  std::string ssh_config;              // for --ssh-config / ssh -F
  std::string known_hosts;             // for --ssh-known-hosts

  // Reads $HVDTEST_SSHD_DIR/hosts.env. Throws std::runtime_error saying what is missing (not
  // started through ctest's fixture, or the fixture failed).
  static TestHosts load();

  // The first n addresses joined as an -H list with `slots` each: "127.0.0.2:2,127.0.0.3:2".
  std::string host_list(size_t n, int slots = 1) const;
};

}  // namespace hvd::test
