// docs/cli.md and `hvdrun --help` list the same options: a flag added to one must be added to
// the other.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers

namespace {

std::set<std::string> long_options(const std::string& text, const std::regex& pattern) {
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

}  // namespace

TEST_CASE("docs/cli.md documents every option of --help, and no other", "[cli][docs]") {
  const RunResult r = run_hvdrun({"--help"});
  REQUIRE(r.exit_code == kSuccess);
  // --help: "  -np N, --num-proc N" style lines; every --long name.
  std::set<std::string> in_help = long_options(r.out, std::regex(R"((--[a-z][a-z0-9-]*))"));

  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  // The option tables' first cells: "| `-np N`, `--num-proc N` |" or "| `--mpi` / `--native` |".
  std::set<std::string> in_doc;
  std::istringstream lines(doc.str());
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("| `-")) continue;
    const std::string first_cell = line.substr(0, line.find(" |", 2));
    for (const std::string& name :
         long_options(first_cell, std::regex(R"(`(--[a-z][a-z0-9-]*))"))) {
      in_doc.insert(name);
    }
  }
  // Documented with their short spellings only where CLI11 shows the long form.
  in_help.erase("--");  // "COMMAND follows options or --"
  for (const std::string& name : in_help) {
    INFO(name << " is in --help but not in docs/cli.md's option tables");
    CHECK(in_doc.count(name) == 1);
  }
  for (const std::string& name : in_doc) {
    INFO(name << " is in docs/cli.md's option tables but not in --help");
    CHECK(in_help.count(name) == 1);
  }
}

TEST_CASE("docs/check-ssh.md's JSON example has every field of a --check-ssh row", "[cli][docs]") {
  // localhost needs no SSH: a row without a network.
  const RunResult r = run_hvdrun({"--check-ssh", "--json", "-H", "localhost"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json doc = parse_stdout(r);
  REQUIRE(doc["hosts"].size() == 1);
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/check-ssh.md");
  REQUIRE(in.good());
  std::stringstream page;
  page << in.rdbuf();
  for (const auto& [key, value] : doc["hosts"][0].items()) {
    INFO(key << " is in a --check-ssh --json row but not in docs/check-ssh.md");
    CHECK_THAT(page.str(), Contains("\"" + key + "\""));
  }
}
