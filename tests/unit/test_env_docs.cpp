// docs/environment.md and the contract table must list the same variables.
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "worker/contract/env_table.h"

TEST_CASE("docs/environment.md documents exactly the contract table", "[docs]") {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/environment.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();

  // The contract section's table rows: | `NAME` | kind | ...
  const auto start = doc.find("## Set by hvdrun for every rank");
  const auto end = doc.find("\n## ", start + 1);
  REQUIRE(start != std::string::npos);
  const std::string section = doc.substr(start, end - start);
  std::set<std::string> documented;
  const std::regex row(R"(\n\| `([A-Z_]+)` \|)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1]);
  }
  std::set<std::string> table;
  for (const auto* var : hvd::contract::env_table()) table.insert(std::string(var->name));
  CHECK(documented == table);
}
