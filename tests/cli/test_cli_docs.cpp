// docs/cli.md and `hvdrun --help` list the same options, with the same names for their values:
// a flag added to one must be added to the other.
#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers

namespace {

// An option's spellings and what follows: docs/cli.md: the name of its value ("" for a flag):
// "--ssh-timeout" -> "SECONDS"; --help: the rest of its line, value and description.
using Spellings = std::map<std::string, std::string>;

// --help's option lines, "  -H,--hosts LIST    Hosts and ...": the first word holds the names.
// Horovod's single-dash spellings, which CLI11 cannot show as names, are in the descriptions as
// "(also -np)": there the rest is unknown, and left empty.
Spellings help_spellings(const std::string& help) {
  Spellings out;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    static const std::regex kAlso(R"(\(also (-[a-z]+)\))");
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kAlso);
         it != std::sregex_iterator(); ++it) {
      out.emplace((*it)[1], "");
    }
    if (!line.starts_with("  -")) continue;
    const size_t names_end = std::min(line.find(' ', 2), line.size());
    std::istringstream split(line.substr(2, names_end - 2));
    for (std::string name; std::getline(split, name, ',');) out[name] = line.substr(names_end);
  }
  return out;
}

// Whether --help's rest of an option's line starts with the docs' value name (then a space or
// the line's end), or for a flag, with the description's padding (or nothing).
bool help_value_is(const std::string& rest, const std::string& value) {
  if (value.empty()) return rest.empty() || rest.starts_with("  ");
  return rest == " " + value || rest.starts_with(" " + value + " ");
}

// docs/cli.md's option tables: the first cell's spellings, "| `-np N`, `--num-proc N` |",
// "| `--mpi` / `--native` |", "| `--launcher auto\|ssh\|srun` |".
Spellings doc_spellings(const std::string& doc) {
  Spellings out;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("| `-")) continue;
    std::string cell = line.substr(2, line.find(" |", 2) - 2);
    cell = std::regex_replace(cell, std::regex(R"(\\\|)"), "|");
    static const std::regex kSpelling(R"(`(-{1,2}[a-zA-Z][a-zA-Z0-9-]*)( [^`]+)?`)");
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), kSpelling);
         it != std::sregex_iterator(); ++it) {
      out[(*it)[1]] = (*it)[2].matched ? (*it)[2].str().substr(1) : "";
    }
  }
  return out;
}

}  // namespace

TEST_CASE("docs/cli.md documents every option of --help, and no other", "[cli][docs]") {
  const RunResult r = run_hvdrun({"--help"});
  REQUIRE(r.exit_code == kSuccess);
  const Spellings in_help = help_spellings(r.out);
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  const Spellings in_doc = doc_spellings(doc.str());
  REQUIRE(in_help.size() > 40);  // the parsers found the lists
  for (const auto& [name, value] : in_help) {
    INFO(name << " is in --help but not in docs/cli.md's option tables");
    CHECK(in_doc.count(name) == 1);
  }
  for (const auto& [name, value] : in_doc) {
    INFO(name << " is in docs/cli.md's option tables but not in --help");
    CHECK(in_help.count(name) == 1);
  }
  // The docs name each option's value as --help does ("--ssh-timeout SECONDS" in both).
  for (const auto& [name, rest] : in_help) {
    if (rest.empty() || in_doc.count(name) == 0) continue;
    INFO(name << ": --help has '" << name << rest.substr(0, 40) << "', docs/cli.md '" << name << " "
              << in_doc.at(name) << "'");
    CHECK(help_value_is(rest, in_doc.at(name)));
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
    CHECK_THAT(page.str(), ContainsSubstring("\"" + key + "\""));
  }
}
