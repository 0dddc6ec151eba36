// The run record's file (launcher/core/run_record.h): its lines, its mode, its bound, and the
// paths it refuses. What a launch writes to it: tests/e2e/test_run_record.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/core/run_record.h"

using Catch::Matchers::ContainsSubstring;
using hvd::launcher::RunRecord;
using json = nlohmann::ordered_json;

namespace {

// A folder of its own under the system's temporary folder, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "hvd_record_XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::vector<json> lines_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("record: one JSON object per line, t and event first, the fields after", "[record]") {
  TempDir dir;
  const auto file = dir.path / "run.jsonl";
  {
    auto record = RunRecord::open(file.string());
    record->event("launch", {{"np", 2}, {"command", {"python3", "train.py"}}});
    record->set_attempt(2);
    record->event("rank_started", {{"attempt", record->attempt()}, {"rank", 1}, {"pid", 42}});
    record->event("odd bytes", {{"host", std::string("b\xff")}});  // not UTF-8: replaced
    record->end({{"exit_code", 3}});
  }
  const std::vector<json> lines = lines_of(file);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].begin().key() == "t");
  CHECK(lines[0].at("event") == "launch");
  CHECK(lines[0].at("np") == 2);
  CHECK(lines[0].at("command") == json({"python3", "train.py"}));
  CHECK(lines[1].at("attempt") == 2);
  CHECK(lines[1].at("pid") == 42);
  CHECK(lines[2].at("host").get<std::string>().rfind("b", 0) == 0);
  CHECK(lines[3].at("event") == "end");
  CHECK(lines[3].at("exit_code") == 3);
  CHECK(!lines[3].contains("left_out"));
  for (std::size_t i = 1; i < lines.size(); ++i) {
    CHECK(lines[i].at("t").get<double>() >= lines[i - 1].at("t").get<double>());
  }
}

TEST_CASE("record: the file is the user's alone, and an existing one is truncated", "[record]") {
  TempDir dir;
  const auto file = dir.path / "run.jsonl";
  std::ofstream(file) << "an older run's lines\nand more\n";
  ::chmod(file.c_str(), 0644);
  {
    auto record = RunRecord::open(file.string());
    record->end({{"exit_code", 0}});
  }
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // what it was does not matter
  CHECK(lines_of(file).size() == 1);
  const auto fresh = dir.path / "new.jsonl";
  RunRecord::open(fresh.string());
  REQUIRE(::stat(fresh.c_str(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);
}

TEST_CASE(
    "record: a symbolic link, a missing folder, an empty path, a FIFO and a device are refused",
    "[record]") {
  TempDir dir;
  const auto target = dir.path / "elsewhere";
  std::ofstream(target) << "someone else's file\n";
  const auto link = dir.path / "run.jsonl";
  std::filesystem::create_symlink(target, link);
  try {
    RunRecord::open(link.string());
    FAIL("a link was followed");
  } catch (const hvd::Error& e) {
    CHECK(e.kind() == hvd::ErrorKind::kUsage);
    CHECK_THAT(e.what(), ContainsSubstring(link.string()));
    CHECK_THAT(e.what(), ContainsSubstring("symbolic link"));
  }
  std::ifstream in(target);
  std::string kept;
  std::getline(in, kept);
  CHECK(kept == "someone else's file");
  try {
    RunRecord::open((dir.path / "no such folder" / "run.jsonl").string());
    FAIL("a file in a missing folder was made");
  } catch (const hvd::Error& e) {
    CHECK(e.kind() == hvd::ErrorKind::kUsage);
    CHECK_THAT(e.what(), ContainsSubstring("No such file or directory"));
  }
  CHECK_THROWS_AS(RunRecord::open(""), hvd::UsageError);
  // A FIFO with no reader would block open(2) for good; one is refused at once, as is a device.
  const auto fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  try {
    RunRecord::open(fifo.string());
    FAIL("a FIFO was taken as the record");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), ContainsSubstring("FIFO"));
  }
  try {
    RunRecord::open("/dev/null");
    FAIL("a device was taken as the record");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), ContainsSubstring("not a regular file"));
  }
}

TEST_CASE("record: past its bound one 'truncated' line, then only the end, with the count",
          "[record]") {
  TempDir dir;
  const auto file = dir.path / "run.jsonl";
  constexpr std::size_t kBound = 4096;
  {
    auto record = RunRecord::open(file.string(), kBound);
    for (int i = 0; i < 200; ++i) record->event("rank_started", {{"rank", i}, {"pid", 1000 + i}});
    CHECK(record->bytes() <= kBound);
    record->end({{"exit_code", 0}});
  }
  const std::vector<json> lines = lines_of(file);
  REQUIRE(lines.size() >= 3);
  CHECK(std::filesystem::file_size(file) < kBound + 512);
  const json& truncated = lines[lines.size() - 2];
  CHECK(truncated.at("event") == "truncated");
  CHECK(truncated.at("max_bytes") == kBound);
  const json& end = lines.back();
  CHECK(end.at("event") == "end");
  const std::size_t kept = lines.size() - 2;  // the rank_started lines written
  CHECK(end.at("left_out") == 200 - kept);
  CHECK(lines[kept - 1].at("rank") == kept - 1);
}
