// The hang verdict's pure parts (docs/why.md): the coordinator's stall report
// (allreduce/engine/controller.h), its line on the report channel
// (allreduce/runtime/report_channel.h) read back by the launcher
// (launcher/core/stall_verdict.h), what an agent reads of a process (agent/inspect.h), and the
// verdict's text and JSON. The whole path, over real processes: tests/e2e/test_why.cpp.
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "agent/inspect.h"
#include "agent/protocol.h"
#include "allreduce/runtime/report_channel.h"
#include "common/error.h"
#include "contract/report.h"
#include "launcher/core/stall_verdict.h"
#include "launcher/core/stragglers.h"
#include "tests/unit/libhvd_control_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::launcher::RankInspection;
using hvd::launcher::StalledOp;
using hvd::runtime::encode_stall_report;
using hvd::runtime::StalledTensor;
using hvd::runtime::StallReport;

namespace {

// A controller of `size` ranks whose stall reports land in `out`.
Controller reporting(int size, std::vector<StallReport>& out, std::vector<int> global = {}) {
  ControllerOptions o{.size = size, .stall_warning = std::chrono::seconds(2)};
  o.set_id = global.empty() ? 0 : 1;
  o.global_ranks = std::move(global);
  o.on_stall = [&out](const StallReport& r) { out.push_back(r); };
  return Controller(o);
}

}  // namespace

TEST_CASE("why: a stall report says who waits, who is missing and what it submitted instead",
          "[why]") {
  std::vector<StallReport> reports;
  Controller c = reporting(3, reports);
  c.add(0, names_list({"a"}), at(0));
  c.add(2, names_list({"a"}), at(0.5));
  c.add(1, names_list({"b"}), at(1));
  c.check_stalls(at(1.5));
  CHECK(reports.empty());  // not due yet
  c.check_stalls(at(3.5));
  REQUIRE(reports.size() == 1);
  const StallReport& r = reports[0];
  CHECK(r.process_set == 0);
  REQUIRE(r.tensors.size() == 2);
  CHECK(r.tensors[0].name == "a");
  CHECK(r.tensors[0].waiting == std::vector<int>{0, 2});
  CHECK(r.tensors[0].waited == std::chrono::milliseconds(3500));
  REQUIRE(r.tensors[0].missing.size() == 1);
  CHECK(r.tensors[0].missing[0].rank == 1);
  CHECK(r.tensors[0].missing[0].submitted == std::vector<std::string>{"b"});
  CHECK(r.tensors[1].name == "b");
  CHECK(r.tensors[1].waiting == std::vector<int>{1});
  REQUIRE(r.tensors[1].missing.size() == 2);
  CHECK(r.tensors[1].missing[0].submitted == std::vector<std::string>{"a"});
  // Nothing more until the next period; the stall ends when rank 1 submits 'a'.
  c.check_stalls(at(4));
  CHECK(reports.size() == 1);
}

TEST_CASE("why: a process set's stall report names global ranks", "[why]") {
  std::vector<StallReport> reports;
  Controller c = reporting(2, reports, {3, 5});
  c.add(0, names_list({"x"}), at(0));
  c.check_stalls(at(2));
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].process_set == 1);
  CHECK(reports[0].tensors[0].waiting == std::vector<int>{3});
  CHECK(reports[0].tensors[0].missing[0].rank == 5);
}

TEST_CASE("why: the report line reads back as it was sent, odd names included", "[why]") {
  StallReport r;
  r.process_set = 2;
  r.set_label = "process set 2 (ranks 0, 1)";
  StalledTensor t;
  t.name = "grad \"w\"\n\\1";
  t.kind = OpKind::kBroadcast;
  t.waited = std::chrono::milliseconds(3100);
  t.waiting = {0, 1};
  t.missing = {{2, {"other", "x\ty"}}, {3, {}}};
  r.tensors.push_back(t);
  const std::string line = encode_stall_report(r);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);  // one line
  const std::vector<StalledOp> ops =
      hvd::launcher::parse_stall_report(std::string_view(line).substr(0, line.size() - 1));
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].op == "broadcast");
  CHECK(ops[0].tensor == t.name);
  CHECK(ops[0].process_set == 2);
  CHECK(ops[0].set_label == r.set_label);
  CHECK(std::abs(ops[0].seconds - 3.1) < 1e-9);
  CHECK(ops[0].waiting == std::vector<int>{0, 1});
  REQUIRE(ops[0].missing.size() == 2);
  CHECK(ops[0].missing[0].submitted == std::vector<std::string>{"other", "x\ty"});
  CHECK(hvd::launcher::missing_ranks(ops) == std::vector<int>{2, 3});
}

TEST_CASE("why: a report of thousands of tensors is cut to fit one channel line", "[why]") {
  StallReport r;
  for (int i = 0; i < 5000; ++i) {
    StalledTensor t;
    t.name = "model.layer." + std::to_string(i) + ".weight.grad";
    t.waiting = {0};
    t.missing = {{1, {}}};
    r.tensors.push_back(t);
  }
  const std::string line = encode_stall_report(r);
  CHECK(line.size() <= hvd::contract::kMaxReportLine);
  const auto doc = nlohmann::json::parse(line);
  const auto kept = doc["tensors"].size();
  CHECK(kept > 100);
  CHECK(doc["left_out"].get<size_t>() == 5000 - kept);
}

TEST_CASE("why: a malformed stall report is an error that says what is wrong", "[why]") {
  for (const auto& [line, needle] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "not a JSON object"},
           {R"({"kind":"other"})", "not a stall report"},
           {R"({"kind":"stall","process_set":0,"set_label":"","tensors":{}})", "'tensors'"},
           {R"({"kind":"stall","process_set":0,"set_label":"","tensors":[{"op":"allreduce",)"
            R"("tensor":"t","seconds":1,"waiting":["x"],"missing":[]}]})",
            "'waiting'"},
           {R"({"kind":"stall","process_set":0,"set_label":"","tensors":[{"op":"allreduce",)"
            R"("tensor":"t","seconds":1,"waiting":[0],"missing":[{"submitted":[]}]}]})",
            "without its number"}}) {
    INFO(line);
    try {
      hvd::launcher::parse_stall_report(line);
      FAIL("expected an hvd::Error");
    } catch (const hvd::Error& e) {
      CHECK_THAT(e.what(), ContainsSubstring("malformed"));
      CHECK_THAT(e.what(), ContainsSubstring(needle));
    }
  }
}

TEST_CASE("why: /proc/PID/stat is read whatever the process's name holds", "[why]") {
  const auto s = hvd::agent::parse_proc_stat(
      "1234 (python3 (x) S 1) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100\n");
  REQUIRE(s.has_value());
  CHECK(s->name == "python3 (x) S 1");
  CHECK(s->state == 'S');
  CHECK(s->cpu_ticks == 300);
  CHECK_FALSE(hvd::agent::parse_proc_stat("1234 python3 S 1").has_value());
  CHECK_FALSE(hvd::agent::parse_proc_stat("1234 (p) S 1 2 3").has_value());
  CHECK(std::string(hvd::agent::state_name('D')) == "uninterruptible");
  CHECK(std::string(hvd::agent::state_name('t')) == "stopped");
  CHECK(std::string(hvd::agent::state_name('Z')) == "zombie");
  // This process: running (it is reading), its threads listed.
  const auto self = hvd::agent::sample_process(::getpid());
  REQUIRE(self.has_value());
  CHECK(self->state == 'R');
  CHECK_FALSE(hvd::agent::thread_states(::getpid()).empty());
  CHECK_FALSE(hvd::agent::sample_process(-1).has_value());
}

TEST_CASE("why: faulthandler's dump becomes file:line frames under their threads", "[why]") {
  const std::string dump =
      "Thread 0x00007f0000000001 (most recent call first):\n"
      "  File \"/usr/lib/python3/threading.py\", line 320 in wait\n"
      "\n"
      "Current thread 0x00007f0000000002 (most recent call first):\n"
      "  File \"train.py\", line 41 in load_batch\n"
      "  File \"train.py\", line 50 in <module>\n"
      "garbage\n";
  CHECK(hvd::agent::parse_faulthandler_dump(dump) ==
        std::vector<std::string>{
            "thread 0x00007f0000000001:", "/usr/lib/python3/threading.py:320 in wait",
            "thread 0x00007f0000000002 (current):", "train.py:41 in load_batch",
            "train.py:50 in <module>"});
  CHECK(hvd::agent::parse_faulthandler_dump(dump, 2).size() == 2);
  CHECK(hvd::agent::parse_faulthandler_dump("").empty());
}

TEST_CASE("why: the verdict names the culprit, its host, its state and stack", "[why]") {
  std::vector<StalledOp> ops(2);
  ops[0] = {"allreduce", "grad.1", 0, "", 3.1, {0, 2}, {{1, {"grad.9"}}}};
  ops[1] = {"allreduce", "grad.2", 0, "", 3.0, {0, 2}, {{1, {"grad.9"}}}};
  std::vector<RankInspection> found{
      {1, "10.0.0.2",
       nlohmann::json{{"rank", 1},
                      {"pid", 77},
                      {"state", "sleeping"},
                      {"cpu_percent", 0.0},
                      {"engine", "sleeping"},
                      {"stack", {"thread 0x1 (current):", "train.py:41 in load_batch"}}}}};
  const std::vector<std::string> lines = hvd::launcher::render_verdict(ops, found);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] ==
        "stall: rank 1 has not submitted allreduce 'grad.1', allreduce 'grad.2', which ranks 0, "
        "2 have waited on for 3.1 s");
  CHECK(lines[1] ==
        "  rank 1 on 10.0.0.2: pid 77: sleeping, 0% CPU, engine thread sleeping; it submitted "
        "'grad.9' instead: are the ranks calling different ops?");
  CHECK(lines[4] == "        train.py:41 in load_batch");
  const auto json = hvd::launcher::stalls_json(ops, found);
  REQUIRE(json.size() == 2);
  CHECK(json[0]["missing"][0]["host"] == "10.0.0.2");
  CHECK(json[0]["missing"][0]["state"] == "sleeping");
  CHECK(json[0]["missing"][0]["submitted"] == nlohmann::json::array({"grad.9"}));
  // No answer from its agent: said so, the entry's state unknown.
  const auto silent = hvd::launcher::render_verdict(ops, {{1, "10.0.0.2", nullptr}});
  CHECK_THAT(silent[1], ContainsSubstring("its agent did not answer"));
  CHECK(hvd::launcher::stalls_json(ops, {})[0]["missing"][0]["state"] == "unknown");
  // The same stall a period later (more seconds, other CPU figures) keeps its key; another
  // state does not.
  std::vector<StalledOp> later = ops;
  later[0].seconds = 5.1;
  std::vector<RankInspection> busier = found;
  busier[0].found["cpu_percent"] = 3.0;
  CHECK(hvd::launcher::verdict_key(ops, found) == hvd::launcher::verdict_key(later, busier));
  busier[0].found["state"] = "running";
  CHECK(hvd::launcher::verdict_key(ops, found) != hvd::launcher::verdict_key(later, busier));
}

TEST_CASE("why: a rank report frame carries one line, at most the channel's limit", "[why]") {
  const std::string payload = hvd::agent::encode_rank_report({3, R"({"kind":"stall"})"});
  const auto back = hvd::agent::decode_rank_report(payload);
  CHECK(back.rank == 3);
  CHECK(back.line == R"({"kind":"stall"})");
  CHECK_THROWS_AS(hvd::agent::decode_rank_report(payload + "\nmore"), hvd::Error);
  CHECK_THROWS_AS(hvd::agent::decode_rank_report("ab"), hvd::Error);
  CHECK_THROWS_AS(hvd::agent::decode_rank_report(
                      std::string(4, '\0') + std::string(hvd::contract::kMaxReportLine + 1, 'x')),
                  hvd::Error);
}

TEST_CASE("why: a negotiation cycle a rank never answered: frozen, or alive behind a cut link",
          "[why]") {
  StallReport r;
  StalledTensor t;
  t.cycle = true;
  t.name = "allreduce.grad.7";
  t.waited = std::chrono::milliseconds(4000);
  t.waiting = {0};
  t.missing = {{1, {}}};
  r.tensors.push_back(t);
  const std::string line = encode_stall_report(r);
  const auto ops = hvd::launcher::parse_stall_report(line.substr(0, line.size() - 1));
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].op == "negotiation");
  const auto lines = hvd::launcher::render_verdict(ops, {});
  REQUIRE_FALSE(lines.empty());
  CHECK(lines[0] ==
        "stall: rank 1 has not answered negotiation (it brought 'allreduce.grad.7'), which rank "
        "0 has waited on for 4.0 s: frozen (stopped, in a debugger) or its host stalled?");
  // Its agent found it stopped: frozen, as said.
  const auto stopped = nlohmann::json::parse(R"({"state":"stopped","pid":7,"engine":"stopped"})");
  CHECK_THAT(hvd::launcher::render_verdict(ops, {{1, "h", stopped}}).at(0),
             ContainsSubstring("frozen (stopped, in a debugger)"));
  // Alive, its engine thread there: not frozen; what lies between it and rank 0 is suspect.
  const auto alive =
      nlohmann::json::parse(R"({"state":"sleeping","pid":7,"cpu_percent":0,"engine":"sleeping"})");
  const std::string head = hvd::launcher::render_verdict(ops, {{1, "h", alive}}).at(0);
  CHECK_THAT(head, ContainsSubstring("its process is alive: is the network between it "
                                     "and rank 0 cut or stalled?"));
  CHECK_THAT(head, !ContainsSubstring("frozen"));
}

TEST_CASE("why: an inspection's fields of the wrong type are dropped, not trusted", "[why]") {
  const auto raw = nlohmann::json::parse(
      R"({"rank":1,"state":7,"pid":"x","cpu_percent":"hot","engine":"sleeping",)"
      R"("stack":["a.py:1 in f",3,{"x":1}],"stack_note":null,"extra":true})");
  const auto clean = hvd::launcher::clean_inspection(raw);
  CHECK(clean == nlohmann::json::parse(R"({"engine":"sleeping","stack":["a.py:1 in f"]})"));
  CHECK(hvd::launcher::clean_inspection(nlohmann::json::array()).empty());
  // What is left renders without throwing: the state unknown.
  std::vector<StalledOp> ops(1);
  ops[0] = {"allreduce", "t", 0, "", 2.0, {0}, {{1, {}}}};
  const auto lines = hvd::launcher::render_verdict(ops, {{1, "h", clean}});
  CHECK_THAT(lines.at(1), ContainsSubstring("rank 1 on h: pid 0: unknown"));
}

TEST_CASE("why: the stall shutdown reports its tensor once, marked, before the fatal error",
          "[why]") {
  std::vector<StallReport> reports;
  ControllerOptions o{.size = 2,
                      .stall_warning = std::chrono::seconds(2),
                      .stall_shutdown = std::chrono::seconds(5)};
  o.on_stall = [&reports](const StallReport& r) { reports.push_back(r); };
  Controller c(o);
  c.add(0, names_list({"a", "b"}), at(0));
  c.check_stalls(at(2));
  REQUIRE(reports.size() == 1);
  CHECK_FALSE(reports[0].shutdown);
  c.check_stalls(at(5));  // a warning's report is due too: the shutdown's comes last
  REQUIRE(reports.size() >= 2);
  const StallReport down = reports.back();
  CHECK(down.shutdown);
  CHECK_FALSE(reports[reports.size() - 2].shutdown);
  REQUIRE(down.tensors.size() == 1);  // the one that ends the job: the first in order
  CHECK(down.tensors[0].name == "a");
  CHECK(down.tensors[0].missing[0].rank == 1);
  CHECK_FALSE(c.take().fatal.empty());
  // The line says so; a warning's does not.
  CHECK(nlohmann::json::parse(encode_stall_report(down)).at("shutdown") == true);
  CHECK_FALSE(nlohmann::json::parse(encode_stall_report(reports[0])).contains("shutdown"));
  const size_t seen = reports.size();
  c.check_stalls(at(9));  // after the fatal error: nothing more
  CHECK(reports.size() == seen);
}

TEST_CASE("why: a verdict in one line names the rank, its host, state and where it is", "[why]") {
  std::vector<StalledOp> ops(1);
  ops[0] = {"allreduce", "grad.1", 0, "", 10.0, {0}, {{1, {}}}};
  const nlohmann::json found = {
      {"pid", 77},
      {"state", "sleeping"},
      {"cpu_percent", 0.0},
      {"engine", "sleeping"},
      {"stack",
       {"thread 0x2:", "pool.py:9 in wait", "thread 0x1 (current):", "train.py:41 in load_batch"}}};
  CHECK(hvd::launcher::verdict_summary(ops, {{1, "b", found}}) ==
        "rank 1 has not submitted allreduce 'grad.1', which rank 0 has waited on for 10.0 s; "
        "rank 1 on b: pid 77: sleeping, 0% CPU, engine thread sleeping, at train.py:41 in "
        "load_batch");
  nlohmann::json no_current = found;
  no_current["stack"] = {"thread 0x2:", "pool.py:9 in wait", "thread 0x1:", "train.py:41 in f"};
  CHECK_THAT(hvd::launcher::verdict_summary(ops, {{1, "b", no_current}}),
             ContainsSubstring("engine thread sleeping, at pool.py:9 in wait"));
  // Stopped: no stack, no frame; no answer: said so.
  CHECK(hvd::launcher::verdict_summary(ops, {{1, "b", {{"pid", 77}, {"state", "stopped"}}}}) ==
        "rank 1 has not submitted allreduce 'grad.1', which rank 0 has waited on for 10.0 s; "
        "rank 1 on b: pid 77: stopped");
  CHECK_THAT(hvd::launcher::verdict_summary(ops, {}),
             ContainsSubstring("rank 1 on ?: its agent did not answer"));
  CHECK(hvd::launcher::verdict_summary({}, {}).empty());
}

TEST_CASE("why: ranks that never called hvd.init() read as such", "[why]") {
  std::vector<StalledOp> ops(1);
  ops[0].op = "init";
  ops[0].seconds = 30.0;
  ops[0].waiting = {0, 1, 3};
  ops[0].missing = {{2, {}}};
  const auto lines = hvd::launcher::render_verdict(ops, {{2, "c", {{"state", "running"}}}});
  REQUIRE(lines.size() >= 2);
  CHECK(lines[0] ==
        "stall: rank 2 has not called hvd.init(), which ranks 0, 1, 3 have waited in for 30.0 s");
  CHECK(hvd::launcher::stalls_json(ops, {})[0]["op"] == "init");
}

namespace {

// A controller of `size` ranks whose hold figures land in `out`, reported every period.
Controller holding(int size, std::vector<hvd::runtime::HoldReport>& out) {
  ControllerOptions o{.size = size, .stall_warning = std::chrono::seconds(0)};
  o.on_holds = [&out](const hvd::runtime::HoldReport& r) { out.push_back(r); };
  o.holds_period = std::chrono::seconds(1);
  return Controller(o);
}

}  // namespace

TEST_CASE("why: the last rank to submit held the others since the second-last one", "[why]") {
  std::vector<hvd::runtime::HoldReport> reports;
  Controller c = holding(3, reports);
  // Step 1: rank 2 comes 0.3 s after rank 1; step 2: 0.2 s after; rank 0 first each time.
  c.add(0, names_list({"a"}), at(0));
  c.add(1, names_list({"a"}), at(0.1));
  c.add(2, names_list({"a"}), at(0.4));
  c.add(0, names_list({"b"}), at(1.5));
  c.add(1, names_list({"b"}), at(1.55));
  c.add(2, names_list({"b"}), at(1.75));
  for (int rank = 0; rank < 3; ++rank) c.add(rank, list_of({}, true), at(1.8));
  REQUIRE(reports.size() >= 2);  // at the first completion, once a period later, at the end
  CHECK(reports[0].ops == 1);
  CHECK_FALSE(reports[0].final);
  const auto& r = reports.back();
  CHECK(r.final);
  CHECK(r.ops == 2);
  CHECK(r.elapsed == std::chrono::milliseconds(1800));
  REQUIRE(r.ranks.size() == 3);
  CHECK(r.ranks[2].held == std::chrono::milliseconds(500));
  CHECK(r.ranks[2].last == 2);
  CHECK(r.ranks[0].held == std::chrono::milliseconds(0));
  CHECK(r.ranks[1].last == 0);
}

TEST_CASE("why: a step's tensors submitted together late count their wait once", "[why]") {
  std::vector<hvd::runtime::HoldReport> reports;
  Controller c = holding(2, reports);
  c.add(0, names_list({"a", "b", "c", "d"}), at(0));
  c.add(1, names_list({"a", "b", "c", "d"}), at(0.5));
  for (int r = 0; r < 2; ++r) c.add(r, list_of({}, true), at(0.6));
  REQUIRE_FALSE(reports.empty());
  const auto& last = reports.back();
  CHECK(last.final);
  CHECK(last.ops == 4);
  CHECK(last.ranks[1].held == std::chrono::milliseconds(500));  // not 4 x 0.5 s
  CHECK(last.ranks[1].last == 4);
  const std::string line = hvd::runtime::encode_hold_report(last);
  const auto back = hvd::launcher::parse_hold_report(line.substr(0, line.size() - 1));
  CHECK(back.final);
  CHECK(back.ops == 4);
  REQUIRE(back.ranks.size() == 2);
  CHECK(std::abs(back.ranks[1].held_s - 0.5) < 1e-9);
  CHECK(back.ranks[1].last == 4);
  // Malformed figures are an error that says what.
  CHECK_THROWS_WITH(hvd::launcher::parse_hold_report(R"({"kind":"holds","process_set":0})"),
                    ContainsSubstring("'elapsed_s' is not a number"));
  CHECK_THROWS_WITH(
      hvd::launcher::parse_hold_report(
          R"({"kind":"holds","process_set":0,"elapsed_s":1,"ops":-1,"final":false,"ranks":[]})"),
      ContainsSubstring("'ops' is not a count"));
}

TEST_CASE("why: a rank that keeps the others waiting is a straggler, a balanced job has none",
          "[why]") {
  using hvd::launcher::HoldFigures;
  // Rank 3 30% slower per step: the others wait about 0.3 / 1.3 of the run for it alone.
  HoldFigures slow{0, 40.0, 400, false, {{0, 0.1, 0}, {1, 0.2, 5}, {2, 0.1, 3}, {3, 9.2, 392}}};
  const auto found = hvd::launcher::find_stragglers(slow);
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 3);
  CHECK(std::abs(found[0].share - 0.23) < 1e-9);
  CHECK(hvd::launcher::straggler_line(found[0], "b", slow) ==
        "straggler: rank 3 on b made the others wait 9.2 s of 40.0 s (23%): it was the last to "
        "submit 98% of 400 ops");
  // Balanced: the waits are spread over the ranks, whatever their sum.
  HoldFigures balanced{
      0, 40.0, 400, false, {{0, 1.5, 90}, {1, 1.8, 110}, {2, 1.2, 100}, {3, 1.6, 100}}};
  CHECK(hvd::launcher::find_stragglers(balanced).empty());
  // Too short a run to say.
  HoldFigures brief = slow;
  brief.ops = 10;
  CHECK(hvd::launcher::find_stragglers(brief).empty());
  // Last often but at no cost (network latency): not a straggler.
  HoldFigures cheap{0, 40.0, 400, false, {{0, 0.0, 0}, {1, 0.4, 400}}};
  CHECK(hvd::launcher::find_stragglers(cheap).empty());
  // Two ranks on shared cores taking turns (Debian 13's main job: rank 0 last in 56% of 282
  // ops, 17% of the run held): no rank keeps the others waiting step after step.
  HoldFigures turns{0, 5.2, 282, false, {{0, 0.9, 158}, {1, 0.4, 124}}};
  CHECK(hvd::launcher::find_stragglers(turns).empty());
  turns.ranks[0].last = 230;  // 82%: now it is one rank, mostly
  CHECK(hvd::launcher::find_stragglers(turns).size() == 1);
}
