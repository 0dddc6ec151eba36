// docs/environment.md and the contract table must list the same variables.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include "tests/support/catch.h"

#include "contract/env_table.h"
#include "ssh/host_check.h"

namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/" + name);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table rows "| `NAME` | cell | cell |" of the section under `heading`: NAME -> the rest.
std::map<std::string, std::string> table_rows(const std::string& doc, const std::string& heading) {
  const auto start = doc.find(heading);
  REQUIRE(start != std::string::npos);
  const auto end = doc.find("\n## ", start + 1);
  const std::string section = doc.substr(start, end - start);
  std::map<std::string, std::string> rows;
  const std::regex row(R"(\n\| `([A-Z_]+)` \|([^\n]*))");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it) {
    rows[(*it)[1]] = (*it)[2];
  }
  return rows;
}

}  // namespace

TEST_CASE("docs/environment.md documents exactly the contract table", "[docs]") {
  std::set<std::string> documented;
  for (const auto& [name, rest] :
       table_rows(read_doc("environment.md"), "## Set by hvdrun for every rank")) {
    documented.insert(name);
  }
  std::set<std::string> table;
  for (const auto* var : hvd::contract::env_table()) table.insert(std::string(var->name));
  CHECK(documented == table);
}

TEST_CASE("docs list libhvd's knobs with the table's defaults and meanings", "[docs]") {
  const auto env_rows = table_rows(read_doc("environment.md"), "## Read by libhvd");
  const auto libhvd_rows = table_rows(read_doc("libhvd.md"), "## Knobs");
  CHECK(env_rows.size() == hvd::contract::knob_table().size());
  CHECK(libhvd_rows.size() == hvd::contract::knob_table().size());
  for (const auto* var : hvd::contract::knob_table()) {
    const std::string name(var->name);
    INFO(name);
    REQUIRE(env_rows.count(name) == 1);
    REQUIRE(libhvd_rows.count(name) == 1);
    const std::string expected =
        " " + hvd::contract::default_text(*var) + " | " + std::string(var->meaning) + " |";
    CHECK(env_rows.at(name) == expected);
    CHECK(libhvd_rows.at(name).find(" " + hvd::contract::default_text(*var) + " |") == 0);
  }
}

TEST_CASE("docs/environment.md names every other library's variable hvdrun sets", "[docs]") {
  const std::string doc = read_doc("environment.md");
  const auto start = doc.find("## Set by hvdrun for every rank");
  const auto end = doc.find("\n## ", start + 1);
  REQUIRE(start != std::string::npos);
  const std::string section = doc.substr(start, end - start);
  for (const auto* var : hvd::contract::library_table()) {
    INFO(var->name);
    CHECK(section.find("`" + std::string(var->name) + "`") != std::string::npos);
  }
}

TEST_CASE("docs/environment.md lists every Horovod knob libhvd does not implement", "[docs]") {
  const std::string doc = read_doc("environment.md");
  const auto start = doc.find("Horovod knobs libhvd knows by name but does not implement");
  REQUIRE(start != std::string::npos);
  const std::string section = doc.substr(start, doc.find("\n## ", start) - start);
  for (const auto& knob : hvd::contract::unimplemented_knobs()) {
    INFO(knob.name);
    CHECK(section.find("`" + std::string(knob.name) + "`") != std::string::npos);
    CHECK(hvd::contract::find_env_var(knob.name) == nullptr);  // not both known and unimplemented
  }
}

TEST_CASE("HOROVOD_* variables that do nothing: a typo, an unimplemented knob, not the rest",
          "[env]") {
  const std::vector<std::string> names{"PATH",
                                       "HOROVOD_FUSION_TRESHOLD",
                                       "HOROVOD_CYCLE_TIME",
                                       "HOROVOD_RANK",
                                       "HOROVOD_WITH_PYTORCH",
                                       "HOROVOD_AUTOTUNE",
                                       "HOROVOD_CACHE_CAPACITY",
                                       "HOROVOD_ZZZ_QQQ_XXX"};
  const auto lines = hvd::contract::horovod_variable_warnings(names);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "HOROVOD_FUSION_TRESHOLD is set, but neither libhvd nor Horovod knows it: it "
        "has no effect (did you mean HOROVOD_FUSION_THRESHOLD?)");
  CHECK_THAT(lines[1], Catch::Matchers::StartsWith(
                           "HOROVOD_AUTOTUNE is set, but libhvd does not implement it: "));
  // Too far from every known name for a suggestion.
  CHECK(lines[2] ==
        "HOROVOD_ZZZ_QQQ_XXX is set, but neither libhvd nor Horovod knows it: it has "
        "no effect");
}

TEST_CASE("docs/check-ssh.md has a row for every --check-ssh code", "[docs]") {
  const std::string doc = read_doc("check-ssh.md");
  for (int c = 0; c < static_cast<int>(hvd::ssh::CheckCode::kCount); ++c) {
    const std::string code(hvd::ssh::to_string(static_cast<hvd::ssh::CheckCode>(c)));
    INFO(code);
    CHECK(doc.find("\n| `" + code + "` |") != std::string::npos);
  }
}

TEST_CASE("docs/troubleshooting.md has a section for every --check-ssh code", "[docs]") {
  const std::string doc = read_doc("troubleshooting.md");
  for (int c = 0; c < static_cast<int>(hvd::ssh::CheckCode::kCount); ++c) {
    const std::string code(hvd::ssh::to_string(static_cast<hvd::ssh::CheckCode>(c)));
    INFO(code);
    CHECK(doc.find("\n### " + code + "\n") != std::string::npos);
  }
}

// catch_discover_tests hands ctest each test's name as a CMake list: a ';' in a name splits it in
// two, and each half runs Catch with a filter that matches nothing, which Catch reports as a
// success. Ten tests once never ran that way.
TEST_CASE("no test name holds a semicolon, which would make ctest run nothing for it", "[docs]") {
  const std::regex test_case(R"re(TEST_CASE\(\s*"((?:[^"\\]|\\.)*)")re");
  int names = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::string(HVD_SOURCE_DIR) + "/tests")) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (auto it = std::sregex_iterator(s.begin(), s.end(), test_case);
         it != std::sregex_iterator(); ++it) {
      ++names;
      INFO(entry.path().string() << ": " << (*it)[1]);
      CHECK((*it)[1].str().find(';') == std::string::npos);
    }
  }
  CHECK(names > 400);  // the scan found the tests
}
