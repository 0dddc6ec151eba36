// libhvd's timeline (allreduce/engine/timeline.h) on its own: Horovod's names and metadata, files
// that are valid JSON once stop() returns, start/stop in any order, another file, the same file.
#include <stdlib.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include "tests/support/catch.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "allreduce/engine/timeline.h"
#include "tests/unit/libhvd_control_helpers.h"

using hvd::runtime::Timeline;
using nlohmann::json;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hvd-timeline-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

json parse(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());  // throws unless the whole file is valid JSON
}

// What a file says: the names of begun phases, rows (tensor names), instant marks, rank events.
struct Seen {
  std::multiset<std::string> begun, rows, marks, ranks;
  std::set<std::string> end_dtypes;
  bool start_time = false;
};

Seen seen(const json& events) {
  Seen s;
  for (const json& e : events) {
    const std::string ph = e.at("ph"), name = e.value("name", "");
    if (ph == "M" && name == "process_name") {
      if (e.at("args").contains("start_time_since_epoch_in_micros")) {
        s.start_time = e.at("pid") == 0 && e["args"]["start_time_since_epoch_in_micros"] > 0;
      } else {
        s.rows.insert(e.at("args").at("name").get<std::string>());
      }
    }
    if (ph == "B") s.begun.insert(name);
    if (ph == "i") s.marks.insert(name);
    if (ph == "X") s.ranks.insert(name);
    if (ph == "E" && e.contains("args")) s.end_dtypes.insert(e["args"].at("dtype"));
  }
  return s;
}

// One allreduce's life as the engine and the runtime tell the timeline on rank 0 of 2.
void one_allreduce(Timeline& t, const std::string& name) {
  const Request q = hvd::test::control::allreduce(name, {3}, DataType::kInt16);
  t.cycle_start();
  t.negotiating(q, 0);
  t.negotiating(q, 1);
  Response r;
  r.names = {name};
  t.negotiated(r);
  t.end(name);  // QUEUE
  t.begin(name, "ALLREDUCE");
  t.begin(name, "GLOO_ALLREDUCE");
  t.end(name);
  t.end_op(name, DataType::kInt16, {3});
}

}  // namespace

TEST_CASE("timeline: Horovod's names, phases, metadata and cycle marks", "[libhvd]") {
  TempDir dir;
  Timeline t;
  CHECK_FALSE(t.recording());
  one_allreduce(t, "allreduce.before");  // nothing records: no file, no error
  t.start(dir / "a.json", true, HVD_ERR_INVALID_ARGUMENT, "a");
  CHECK(t.recording());
  one_allreduce(t, "allreduce.test_allreduce");
  t.stop();
  CHECK_FALSE(t.recording());
  one_allreduce(t, "allreduce.after");  // after stop(): not in the file

  const json events = parse(dir / "a.json");
  REQUIRE(events.is_array());
  const Seen s = seen(events);
  CHECK(s.start_time);
  CHECK(s.rows == std::multiset<std::string>{"allreduce.test_allreduce"});
  CHECK(s.begun ==
        std::multiset<std::string>{"NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE", "GLOO_ALLREDUCE"});
  CHECK(s.ranks == std::multiset<std::string>{"0", "1"});
  CHECK(s.marks == std::multiset<std::string>{"CYCLE_START"});
  CHECK(s.end_dtypes == std::set<std::string>{"int16"});
  // Every B has its E on the tensor's row.
  int depth = 0;
  for (const json& e : events) {
    if (e["ph"] == "B") ++depth;
    if (e["ph"] == "E") CHECK(--depth >= 0);
  }
  CHECK(depth == 0);
}

TEST_CASE("timeline: stop without start, twice, the same file again, another file", "[libhvd]") {
  TempDir dir;
  Timeline t;
  t.stop();  // nothing records: harmless
  t.stop();
  CHECK_FALSE(std::filesystem::exists(dir / "b.json"));

  t.start(dir / "b.json", false, HVD_ERR_INVALID_ARGUMENT, "b");
  one_allreduce(t, "first");
  t.start(dir / "b.json", false, HVD_ERR_INVALID_ARGUMENT, "b");  // the same file: goes on
  one_allreduce(t, "second");
  t.start(dir / "./b.json", false, HVD_ERR_INVALID_ARGUMENT, "b");  // spelled otherwise: the same
  one_allreduce(t, "third");
  t.start(dir / "c.json", true, HVD_ERR_INVALID_ARGUMENT, "c");  // another: b is complete now
  const Seen b = seen(parse(dir / "b.json"));
  CHECK(b.rows == std::multiset<std::string>{"first", "second", "third"});
  CHECK(b.marks.empty());  // mark_cycles was false
  one_allreduce(t, "fourth");
  t.stop();
  t.stop();
  const Seen c = seen(parse(dir / "c.json"));
  CHECK(c.start_time);
  CHECK(c.rows == std::multiset<std::string>{"fourth"});
  CHECK(c.marks == std::multiset<std::string>{"CYCLE_START"});
  CHECK(seen(parse(dir / "b.json")).rows.size() == 3);  // untouched by the later file
}

TEST_CASE("timeline: a file that cannot be written is an error naming it, recording goes on",
          "[libhvd]") {
  TempDir dir;
  Timeline t;
  t.start(dir / "d.json", false, HVD_ERR_INVALID_ARGUMENT, "d");
  try {
    t.start(dir / "no/such/dir.json", false, HVD_ERR_INVALID_ARGUMENT,
            "start_timeline(\"no/such/dir.json\")");
    FAIL("an unwritable path was accepted");
  } catch (const StatusError& e) {
    CHECK(e.status() == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring(
                             "start_timeline(\"no/such/dir.json\"): cannot write it"));
  }
  CHECK(t.recording());
  one_allreduce(t, "kept");
  // A symbolic link is never followed: its target keeps its bytes.
  const std::string victim = dir / "victim";
  std::ofstream(victim) << "precious\n";
  std::filesystem::create_symlink(victim, dir / "link.json");
  CHECK_THROWS_WITH(
      t.start(dir / "link.json", false, HVD_ERR_CONFIG, "HOROVOD_TIMELINE=x"),
      Catch::Matchers::ContainsSubstring("is a symbolic link: libhvd does not follow it"));
  t.stop();
  CHECK(seen(parse(dir / "d.json")).rows == std::multiset<std::string>{"kept"});
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  CHECK(line == "precious");
}

TEST_CASE("timeline: a process set's view records into the global file, naming the set",
          "[libhvd]") {
  TempDir dir;
  auto global = std::make_shared<Timeline>();
  Timeline set(global, 2, {0, 3});  // process set 2: global ranks 0 and 3
  CHECK_FALSE(set.recording());
  global->start(dir / "s.json", true, HVD_ERR_INVALID_ARGUMENT, "s");
  CHECK(set.recording());
  one_allreduce(*global, "allreduce.grad");
  one_allreduce(set, "allreduce.grad");  // the same name in the set: a row of its own
  set.stop();                            // the parent's: closes the file
  CHECK_FALSE(global->recording());

  const json events = parse(dir / "s.json");
  const Seen s = seen(events);
  CHECK(s.rows == std::multiset<std::string>{"allreduce.grad", "allreduce.grad [process set 2]"});
  CHECK(s.ranks == std::multiset<std::string>{"0", "1", "0", "3"});  // the set's: global ranks
  int with_set = 0, set_marks = 0;
  for (const json& e : events) {
    if (!e.contains("args") || !e["args"].contains("process_set")) continue;
    CHECK(e["args"]["process_set"] == 2);
    ++with_set;
    if (e.value("name", "") == "CYCLE_START") ++set_marks;
  }
  CHECK(with_set == 3);  // NEGOTIATE_ALLREDUCE, the op's end, the set's cycle mark
  CHECK(set_marks == 1);
}
