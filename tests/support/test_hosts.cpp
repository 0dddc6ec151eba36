#include "tests/support/test_hosts.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace hvd::test {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

TestHosts TestHosts::load() {
  const char* dir = std::getenv("HVDTEST_SSHD_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw std::runtime_error(
        "HVDTEST_SSHD_DIR is not set: run this test through ctest (it starts the sshd_hosts "
        "fixture), or start tests/sshd/sshd_hosts.sh by hand and export the variable");
  }
  const std::string path = std::string(dir) + "/hosts.env";
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error(path + " is missing: did the sshd_hosts_start fixture fail?");
  }
  std::map<std::string, std::string> vars;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto need = [&](const std::string& key) {
    auto it = vars.find(key);
    if (it == vars.end()) throw std::runtime_error(path + " has no " + key);
    return it->second;
  };
  TestHosts hosts;
  hosts.dir = dir;
  hosts.port = std::stoi(need("HVDTEST_SSH_PORT"));
  hosts.user = need("HVDTEST_SSH_USER");
  hosts.addresses = split_commas(need("HVDTEST_SSH_ADDRS"));
  hosts.key = need("HVDTEST_SSH_KEY");
  hosts.ssh_config = need("HVDTEST_SSH_CONFIG");
  hosts.known_hosts = need("HVDTEST_SSH_KNOWN_HOSTS");
  return hosts;
}

std::string TestHosts::host_list(size_t n, int slots) const {
  if (n > addresses.size()) {
    throw std::runtime_error("asked for " + std::to_string(n) + " test hosts, the fixture has " +
                             std::to_string(addresses.size()));
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (!out.empty()) out += ',';
    out += addresses[i] + ":" + std::to_string(slots);
  }
  return out;
}

}  // namespace hvd::test
