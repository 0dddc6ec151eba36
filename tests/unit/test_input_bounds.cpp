// Files the user names are read with a bound and parsed in linear time (issue 51, finding 14):
// a 3.8 MB --config-file of 200,000 duplicate keys or a hostfile of 200,000 hosts took over 50 s
// of CPU (a pairwise duplicate check), and neither file had a size bound.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include "tests/support/catch.h"

#include "cli/config_file.h"
#include "launcher/plan/host_spec.h"
#include "test_helpers.h"

using hvd::test::require_usage_error;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const auto path =
      std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

}  // namespace

TEST_CASE("hostfile: 200,000 hosts are checked for duplicates in linear time", "[hosts]") {
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "h" + std::to_string(i) + " slots=1\n";
  const auto start = Clock::now();
  const auto hosts = hvd::launcher::parse_hostfile(text, "big");
  CHECK(Clock::now() - start < 5s);  // before: minutes (every pair compared)
  CHECK(hosts.size() == 200000);
  // A duplicate is still named, with its first place.
  require_usage_error([&] { hvd::launcher::parse_hostfile(text + "h7 slots=2\n", "big"); },
                      "big:200001: host 'h7' is listed again (first at big:8)");
}

TEST_CASE("hostfile and config file: a file over the bound is refused by name", "[hosts]") {
  const std::string big =
      temp_file("hvd-hostfile", std::string(hvd::launcher::kMaxHostfileBytes + 1, '#'));
  require_usage_error([&] { hvd::launcher::read_hostfile(big); },
                      "--hostfile " + big + ": larger than 4 MiB, the most hvdrun reads");
  std::filesystem::remove(big);
  const std::string yaml =
      temp_file("hvd-config", std::string(hvd::cli::kMaxConfigFileBytes + 1, '#'));
  require_usage_error([&] { hvd::cli::load_config_file(yaml); },
                      "--config-file " + yaml + ": larger than 1 MiB, the most hvdrun reads");
  std::filesystem::remove(yaml);
}

TEST_CASE("config file: a key given 100,000 times is one setting, the last one", "[cli]") {
  std::string text = "params:\n";
  for (int i = 0; i < 100000; ++i) text += "  cycle_time_ms: " + std::to_string(i % 7 + 1) + "\n";
  const auto start = Clock::now();
  const auto settings = hvd::cli::parse_config_text(text, "dup.yaml");
  CHECK(Clock::now() - start < 10s);
  REQUIRE(settings.size() == 1);  // before: 100,000 settings, each a flag on the command line
  CHECK(settings[0].args == std::vector<std::string>{"--cycle-time-ms", "5"});
  CHECK(settings[0].where.starts_with("dup.yaml:100001:"));
}
