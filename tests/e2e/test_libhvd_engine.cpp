// libhvd's engine across real processes: named async ops in different orders, late submissions,
// mismatch errors, the stall inspector and the timeline (tests/libhvd/libhvd_check.cpp's modes).
#include "tests/support/catch.h"
#include "tests/support/open_mpi.h"

#include <map>
#include <set>

#include "tests/cli/process.h"
#include "tests/e2e/launch_ssh_helpers.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::launch_ssh::Hosts;
using hvd::test::launch_ssh::show;
using nlohmann::json;

namespace {

// The engine's three negotiations: under Gloo (native) through rank 0's engine thread over the
// TCP control plane (HOROVOD_GLOO_CYCLES=0) or in cycles over TCP (=1, tcp_cycle_transport.h),
// and under --mpi in cycles on MPI collectives (cycle_engine.h); the behaviour the tests check
// is the same.
enum class Mode { kTcpEngine, kGlooCycles, kMpi };

const char* engine_name(Mode mode) {
  switch (mode) {
    case Mode::kTcpEngine:
      return "native, HOROVOD_GLOO_CYCLES=0 (the TCP engine)";
    case Mode::kGlooCycles:
      return "native, HOROVOD_GLOO_CYCLES=1 (cycles over TCP)";
    case Mode::kMpi:
      break;
  }
  return "--mpi (cycles on MPI)";
}

// `args` (hvdrun's, before the program) and `env` for `mode`.
std::vector<std::pair<std::string, std::string>> with_mode(
    Mode mode, std::vector<std::string>& args,
    std::vector<std::pair<std::string, std::string>> env = {}) {
  if (mode == Mode::kMpi) {
    args.insert(args.begin(), "--mpi");
  } else {
    env.emplace_back("HOROVOD_GLOO_CYCLES", mode == Mode::kGlooCycles ? "1" : "0");
  }
  return env;
}

hvd::test::RunResult run_local(int np, const std::vector<std::string>& args,
                               const std::vector<std::pair<std::string, std::string>>& env = {},
                               Mode mode = Mode::kTcpEngine) {
  std::vector<std::string> argv{"-np", std::to_string(np), LIBHVD_CHECK};
  const auto full_env = with_mode(mode, argv, env);
  argv.insert(argv.end(), args.begin(), args.end());
  return hvd::test::run_hvdrun(argv, full_env);
}

#define ENGINE_MODES GENERATE(Mode::kTcpEngine, Mode::kGlooCycles, Mode::kMpi)

std::string tag(int rank) { return "[1," + std::to_string(rank) + "]<stdout>:"; }

}  // namespace

TEST_CASE("engine: 50 named tensors in a different random order on every rank, over sshd hosts",
          "[engine]") {
  const int np = GENERATE(2, 4);
  Hosts h;
  const std::string hosts =
      np == 2 ? h.addr(20) + "," + h.addr(21) : h.addr(20) + ":2," + h.addr(21) + ":2";
  const auto r = hvd::test::run_hvdrun(
      h.args({"-np", std::to_string(np), "-H", hosts, LIBHVD_CHECK, "async"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < np; ++rank) {
    CHECK_THAT(r.out, ContainsSubstring(tag(rank) + "rank " + std::to_string(rank) +
                                        ": all checks passed"));
  }
}

TEST_CASE("engine: the same under hvdrun --mpi", "[engine]") {
  Hosts h;
  const auto r = hvd::test::run_hvdrun(
      h.args({"--mpi", "-np", "2", "-H", h.addr(22) + "," + h.addr(23), LIBHVD_CHECK, "async"}));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "rank 0: all checks passed"));
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "rank 1: all checks passed"));
}

TEST_CASE("engine: four threads per rank submit and wait at once, native and --mpi", "[engine]") {
  // Ranks other than 0 send batches from the waiting threads: several at once, on 2 of 3 ranks.
  const Mode mode = ENGINE_MODES;
  Hosts h;
  // Open MPI 5's ranks fail in MPI_Init on 2 + 1 ranks over two host entries that are one
  // machine ("num local peers"; hvdrun warns, docs/cli.md): there, 3 hosts x 1.
  const std::string hosts = mode == Mode::kMpi && hvd::test::installed_open_mpi_major() >= 5
                                ? h.addr(24) + "," + h.addr(25) + "," + h.addr(26)
                                : h.addr(24) + ":2," + h.addr(25) + ":1";
  std::vector<std::string> args{"-np", "3", "-H", hosts};
  const auto env = with_mode(mode, args);
  args.insert(args.end(), {LIBHVD_CHECK, "threads"});
  const auto r = hvd::test::run_hvdrun(h.args(args), env);
  INFO(engine_name(mode) << "\n" << show(r));
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(r.out, ContainsSubstring(tag(rank) + "rank " + std::to_string(rank) +
                                        ": all checks passed"));
  }
}

TEST_CASE("engine: rank 0 submits A then B 2 s later, rank 1 B then A: both complete", "[engine]") {
  const Mode mode = ENGINE_MODES;
  const auto r = run_local(2, {"delayed"}, {}, mode);
  INFO(engine_name(mode) << "\n" << show(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "rank 0: delayed A and B both completed correctly"));
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "rank 1: delayed A and B both completed correctly"));
}

TEST_CASE("engine: a mismatch fails every rank's handle with the field and both values",
          "[engine]") {
  const auto [field, message] = GENERATE(
      std::pair<std::string, std::string>{"dtype",
                                          "data type mismatch: rank 0 submitted float32, rank 1 "
                                          "submitted float64"},
      std::pair<std::string, std::string>{"shape",
                                          "shape mismatch: rank 0 submitted [8], rank 1 submitted "
                                          "[9]"},
      std::pair<std::string, std::string>{"op",
                                          "reduce op mismatch: rank 0 submitted sum, rank 1 "
                                          "submitted max"},
      std::pair<std::string, std::string>{"root",
                                          "root rank mismatch: rank 0 submitted 0, rank 1 "
                                          "submitted 1"},
      std::pair<std::string, std::string>{"prescale",
                                          "prescale mismatch: rank 0 submitted 1, rank 1 "
                                          "submitted 2"},
      std::pair<std::string, std::string>{"postscale",
                                          "postscale mismatch: rank 0 submitted 1, rank 1 "
                                          "submitted 2"},
      std::pair<std::string, std::string>{"scatter_prescale",
                                          "prescale mismatch: rank 0 submitted 1, rank 1 "
                                          "submitted 2"},
      std::pair<std::string, std::string>{"scatter_postscale",
                                          "postscale mismatch: rank 0 submitted 1, rank 1 "
                                          "submitted 2"},
      std::pair<std::string, std::string>{"kind",
                                          "operation mismatch: rank 0 submitted allreduce, rank 1 "
                                          "submitted broadcast"});
  const Mode mode = ENGINE_MODES;
  const auto r = run_local(3, {"mismatch", field}, {}, mode);
  INFO(field << " " << engine_name(mode) << "\n" << show(r));
  CHECK(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string me = tag(rank) + "rank " + std::to_string(rank) + ": ";
    CHECK_THAT(r.out,
               ContainsSubstring(
                   me + "mismatch error (HVD_ERR_INVALID_ARGUMENT): tensor 'x': " + message));
    CHECK_THAT(r.out, ContainsSubstring(me + "still in step after the mismatch"));
  }
}

TEST_CASE("engine: the stall inspector names the missing rank and tensor", "[engine]") {
  const Mode mode = ENGINE_MODES;
  const auto r = run_local(2, {"stall", "5"}, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}}, mode);
  INFO(engine_name(mode) << "\n" << show(r));
  CHECK(r.exit_code == 0);  // a warning only: the late tensor completes
  CHECK_THAT(r.err, ContainsSubstring("[1,0]<stderr>:[hvd rank 0] warning: stall: rank 1 has not "
                                      "submitted tensor 'late'"));
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "rank 0: 'late' completed with 2"));
}

TEST_CASE("engine: HOROVOD_STALL_SHUTDOWN_TIME_SECONDS turns a stall into errors", "[engine]") {
  const Mode mode = ENGINE_MODES;
  const bool mpi = mode == Mode::kMpi;
  // Under MPI a failed rank waits in MPI_Finalize (a collective) for the others: rank 1 sleeps
  // less there, or the test would wait for it.
  const auto r = run_local(
      2, {"stall", mpi ? "6" : "20"},
      {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "2"}},
      mode);
  INFO(engine_name(mode) << "\n" << show(r));
  // Rank 0's error ends the job well before rank 1 wakes up; in a native launch hvdrun ends it
  // with the stall's own code (76, docs/why.md), under --mpi the rank's code stands.
  CHECK(r.exit_code == (mpi ? 4 : 76));
  CHECK_THAT(r.out,
             ContainsSubstring(tag(0) + "rank 0: stall error (HVD_ERR_BACKEND): allreduce 'late' "
                                        "failed: stalled for more than "
                                        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (2 s): tensor 'late' "
                                        "was never submitted by rank(s) 1"));
}

TEST_CASE("engine: HOROVOD_STALL_CHECK_DISABLE=1 silences the inspector", "[engine]") {
  const Mode mode = ENGINE_MODES;
  const auto r = run_local(
      2, {"stall", "3"},
      {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVOD_STALL_CHECK_DISABLE", "1"}}, mode);
  INFO(engine_name(mode) << "\n" << show(r));
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("stall") == std::string::npos);
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "rank 1: 'late' completed with 2"));
}

TEST_CASE("engine: the timeline is Chrome trace JSON with every phase and fused responses",
          "[engine]") {
  const Mode mode = ENGINE_MODES;
  const bool mpi = mode == Mode::kMpi;
  hvd::test::TempDir dir;
  const std::string path = dir / "timeline.json";
  const auto r = run_local(2, {"async"}, {{"HOROVOD_TIMELINE", path}}, mode);
  INFO(engine_name(mode) << "\n" << show(r));
  REQUIRE(r.exit_code == 0);
  const json events = json::parse(hvd::test::read_file(path));
  REQUIRE(events.is_array());
  std::set<std::string> phases;
  int most_fused = 0;
  std::set<std::string> tensors;
  for (const json& e : events) {
    if (e.value("ph", "") == "B") phases.insert(e.value("name", ""));
    if (e.value("name", "") == "QUEUE")
      most_fused = std::max(most_fused, e["args"]["fused_with"].get<int>());
    if (e.value("name", "") == "process_name" && e["args"].contains("name")) {
      tensors.insert(e["args"]["name"].get<std::string>());
    }
  }
  const std::string engine = mpi ? "MPI" : "GLOO";
  for (const std::string& p : std::vector<std::string>{
           "NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER",
           engine + "_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER", "NEGOTIATE_BROADCAST", "BROADCAST",
           engine + "_BROADCAST"}) {
    INFO(p);
    CHECK(phases.count(p) == 1);
  }
  CHECK(most_fused >= 2);  // at least one response carried 3 or more tensors
  CHECK(tensors.count("grad.0") == 1);
  CHECK(tensors.count("grad.49") == 1);
}

TEST_CASE("engine: start_timeline/stop_timeline at run time, another file, marks, rank 0 only",
          "[engine]") {
  const Mode mode = ENGINE_MODES;
  hvd::test::TempDir dir;
  const auto r = run_local(2, {"timeline", dir.path()}, {}, mode);
  INFO(engine_name(mode) << "\n" << show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "rank 0: all checks passed"));
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "rank 1: all checks passed"));
  CHECK_FALSE(std::filesystem::exists(dir / "a.rank1.json"));  // rank 0 alone writes
  CHECK_FALSE(std::filesystem::exists(dir / "b.rank1.json"));
  const std::string engine = mode == Mode::kMpi ? "MPI" : "GLOO";
  for (const char* file : {"a", "b"}) {
    INFO("file " << file);
    const json events =
        json::parse(hvd::test::read_file(dir / (std::string(file) + ".rank0.json")));
    REQUIRE(events.is_array());
    std::set<std::string> begun, marks, ranks;
    std::map<int, std::string> rows;                 // pid -> tensor name
    std::map<int, std::set<std::string>> phases_of;  // pid -> the phases begun on its row
    bool start_time = false;
    for (const json& e : events) {
      const std::string ph = e.at("ph"), name = e.value("name", "");
      if (ph == "B") begun.insert(name);
      if (ph == "B") phases_of[e.at("pid").get<int>()].insert(name);
      if (ph == "i") marks.insert(name);
      if (ph == "X") ranks.insert(name);
      if (name == "process_name" && e["args"].contains("name")) rows[e["pid"]] = e["args"]["name"];
      if (name == "process_name" && e["args"].contains("start_time_since_epoch_in_micros")) {
        start_time = e["pid"] == 0;
      }
    }
    CHECK(start_time);
    // The tensors that ran while the file recorded. Rank 1 may submit the next op ("between")
    // before rank 0 stops: its request's arrival is recorded, nothing else of it.
    const std::string tl = std::string("tl.") + file;
    std::set<std::string> ran;
    for (const auto& [pid, name] : rows) {
      const std::set<std::string>& p = phases_of[pid];
      if (p.count("ALLREDUCE") + p.count("BROADCAST") > 0) {
        ran.insert(name);
      } else {
        INFO(name);
        CHECK(name.starts_with("tl.between."));
        CHECK(p.size() <= 1);  // NEGOTIATE_<OP> at most
      }
    }
    CHECK(ran == std::set<std::string>{tl + ".grad", tl + ".weights"});
    const std::vector<std::string> phases{"NEGOTIATE_ALLREDUCE", "QUEUE",
                                          "ALLREDUCE",           engine + "_ALLREDUCE",
                                          "NEGOTIATE_BROADCAST", "BROADCAST"};
    for (const std::string& p : phases) {
      INFO(p);
      CHECK(begun.count(p) == 1);
    }
    CHECK(ranks == std::set<std::string>{"0", "1"});  // each rank's request as it arrived
    CHECK(marks.count("CYCLE_START") == (file == std::string("a") ? 1u : 0u));
  }
}

TEST_CASE("engine flags reach every rank, native and --mpi", "[engine]") {
  const bool mpi = GENERATE(false, true);
  std::vector<std::string> args;
  if (mpi) args.push_back("--mpi");
  for (const char* a : {"-np", "2", "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.3",
                        "--no-stall-check", "sh", "-c",
                        "echo knobs $HOROVOD_FUSION_THRESHOLD $HOROVOD_CYCLE_TIME "
                        "$HOROVOD_STALL_CHECK_DISABLE"}) {
    args.push_back(a);
  }
  const auto r = hvd::test::run_hvdrun(args);
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring(tag(0) + "knobs 2097152 0.3 1"));
  CHECK_THAT(r.out, ContainsSubstring(tag(1) + "knobs 2097152 0.3 1"));
}

TEST_CASE("engine: rank 0 warns once about HOROVOD_* variables that do nothing here", "[engine]") {
  // A typo and a knob libhvd lacks, forwarded by the HOROVOD_* allow-list; a Horovod build
  // variable, which is quiet.
  const auto r = run_local(2, {"collectives"},
                           {{"HOROVOD_FUSION_TRESHOLD", "1"},
                            {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                            {"HOROVOD_WITH_PYTORCH", "1"}});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const std::string typo =
      "HOROVOD_FUSION_TRESHOLD is set, but neither libhvd nor Horovod knows it: it has no effect "
      "(did you mean HOROVOD_FUSION_THRESHOLD?)";
  CHECK_THAT(r.err, ContainsSubstring("[hvd rank 0] warning: " + typo));
  CHECK(r.err.find(typo) == r.err.rfind(typo));  // rank 0 says it, once
  CHECK_THAT(r.err,
             ContainsSubstring("HOROVOD_HIERARCHICAL_ALLREDUCE is set, but libhvd does not "
                               "implement it: libhvd runs one flat allreduce across all ranks"));
  CHECK(r.err.find("HOROVOD_WITH_PYTORCH") == std::string::npos);
}

TEST_CASE("engine: a program that returns without hvd::shutdown() exits cleanly", "[engine]") {
  const Mode mode = ENGINE_MODES;
  std::vector<std::string> args{"-np", "3"};
  const auto env = with_mode(mode, args);
  for (const char* a : {LIBHVD_CHECK, "noshutdown"}) args.push_back(a);
  const auto r = hvd::test::run_hvdrun(args, env);
  INFO(engine_name(mode) << "\n" << show(r));
  CHECK(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(r.out, ContainsSubstring(tag(rank) + "rank " + std::to_string(rank) +
                                        ": returning without hvd::shutdown(), sum 3"));
  }
  CHECK(r.err.find("error") == std::string::npos);
}

TEST_CASE("engine: a timeline path that is a symbolic link is refused, its target untouched",
          "[engine]") {
  hvd::test::TempDir dir;
  const std::string victim = dir / "victim";
  hvd::test::write_file(victim, "precious\n");
  const std::string link = dir / "timeline.json";
  std::filesystem::create_symlink(victim, link);
  const auto r = run_local(2, {"async"}, {{"HOROVOD_TIMELINE", link}});
  INFO(show(r));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.out + r.err, ContainsSubstring("is a symbolic link: libhvd does not follow it"));
  CHECK(hvd::test::read_file(victim) == "precious\n");
}

TEST_CASE(
    "engine: the response cache in cycles (--mpi, native with HOROVOD_GLOO_CYCLES=1): "
    "steady-state hits, the same bits without it, a mismatch after hits, capacity 2 thrashing",
    "[engine]") {
  // libhvd_check cache: 100 tensors x 6 steps in a different order on every rank and step, then
  // a cached name with another shape on rank 1, then 10 names cycling one at a time.
  const Mode mode = GENERATE(Mode::kMpi, Mode::kGlooCycles);
  INFO(engine_name(mode));
  auto run = [](const std::string& capacity, Mode in) {
    std::vector<std::pair<std::string, std::string>> env;
    if (!capacity.empty()) env.emplace_back("HOROVOD_CACHE_CAPACITY", capacity);
    return run_local(3, {"cache"}, env, in);
  };
  // "rank R: steady-state cycles decided by cache bits: K" -> K (-1: no such line).
  auto bits_decided = [](const hvd::test::RunResult& r, int rank) {
    const std::string line = tag(rank) + "rank " + std::to_string(rank) +
                             ": steady-state cycles decided by cache bits: ";
    const auto at = r.out.find(line);
    return at == std::string::npos ? -1L : std::stol(r.out.substr(at + line.size()));
  };
  // "rank R: eager: E of 86 synchronous calls" -> E (-1: no such line).
  auto eager_calls = [](const hvd::test::RunResult& r, int rank) {
    const std::string line = tag(rank) + "rank " + std::to_string(rank) + ": eager: ";
    const auto at = r.out.find(line);
    return at == std::string::npos ? -1L : std::stol(r.out.substr(at + line.size()));
  };
  auto checksum = [](const hvd::test::RunResult& r) {
    const auto at = r.out.find(tag(0) + "rank 0: checksum ");
    REQUIRE(at != std::string::npos);
    return r.out.substr(at, r.out.find('\n', at) - at).substr(tag(0).size() + 16);
  };
  const auto on = run("", mode);
  INFO("default capacity (1024)\n" << show(on));
  REQUIRE(on.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string me = tag(rank) + "rank " + std::to_string(rank) + ": ";
    CHECK_THAT(on.out, ContainsSubstring(me + "steady state per step: hits 100 negotiated 0"));
    // The counter is printed (for a person reading the output); how many steady-state cycles
    // the AND round decides depends on timing: a rank late by over 1 ms is rung into the cycle
    // with part of its queue, which goes to the allgather. Under CI's load it was 0 of 6 once,
    // so only its presence is checked here; the unit test "in the steady state a cycle is one
    // AND round" counts it exactly.
    CHECK(bits_decided(on, rank) >= 0);
    CHECK_THAT(on.out,
               ContainsSubstring(me + "mismatch after hits: tensor 'c.0': shape mismatch: rank 0 "
                                      "submitted [1000], rank 1 submitted [999]"));
    CHECK_THAT(on.out, ContainsSubstring(me + "after the mismatch: ok"));
    CHECK_THAT(on.out, ContainsSubstring(me + "cycling 10 names: hits 40 negotiated 10"));
    CHECK_THAT(on.out, ContainsSubstring(me + "negotiation sizes: ok"));
    // Small synchronous calls ran from the inputs gathered with their negotiation. Not all 86
    // of them need to: a rank late by over 1 ms is rung into a cycle without its call.
    CHECK(eager_calls(on, rank) >= 1);
    CHECK_THAT(on.out, ContainsSubstring(me + "1000 tensors: ok"));
    CHECK_THAT(on.out, ContainsSubstring(me + "all checks passed"));
  }
  const std::string bits = checksum(on);

  // The cache and the eager allreduces off: the same results, from collectives only.
  const auto off = [&] {
    std::vector<std::pair<std::string, std::string>> env{{"HOROVOD_CACHE_CAPACITY", "0"},
                                                         {"HOROVOD_EAGER_BYTES", "0"}};
    return run_local(3, {"cache"}, env, mode);
  }();
  INFO("capacity 0, no eager allreduces\n" << show(off));
  REQUIRE(off.exit_code == 0);
  CHECK(eager_calls(off, 1) == 0);
  CHECK_THAT(off.out, ContainsSubstring(tag(1) + "rank 1: negotiation sizes: ok"));
  CHECK(bits_decided(off, 2) == 0);  // no cache, no AND round
  CHECK_THAT(off.out,
             ContainsSubstring(tag(2) + "rank 2: steady state per step: hits 0 negotiated 100"));
  CHECK_THAT(off.out, ContainsSubstring(tag(2) + "rank 2: cycling 10 names: hits 0 negotiated 50"));
  CHECK(checksum(off) == bits);

  const auto two = run("2", mode);
  INFO("capacity 2\n" << show(two));
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.out, ContainsSubstring(tag(1) + "rank 1: cycling 10 names: hits 0 negotiated 50"));
  CHECK_THAT(two.out, ContainsSubstring(tag(1) + "rank 1: all checks passed"));
  CHECK(checksum(two) == bits);

  // The collectives' exact checks (every op, dtype and size) with the cache off as on, and with
  // no eager allreduces (elsewhere the small ones run from their gathered inputs), in this engine
  // and the TCP engine.
  for (const Mode in : {mode, Mode::kTcpEngine}) {
    const auto exact = run_local(
        2, {"collectives"}, {{"HOROVOD_CACHE_CAPACITY", "0"}, {"HOROVOD_EAGER_BYTES", "0"}}, in);
    INFO("collectives, capacity 0, no eager allreduces, " << engine_name(in) << "\n"
                                                          << show(exact));
    CHECK(exact.exit_code == 0);
    CHECK_THAT(exact.out, ContainsSubstring(tag(1) + "rank 1: all checks passed"));
  }

  // Native (Gloo) without cycles: the TCP engine negotiates every tensor in full, with the same
  // results.
  const auto gloo = run("", Mode::kTcpEngine);
  INFO("the TCP engine\n" << show(gloo));
  REQUIRE(gloo.exit_code == 0);
  CHECK_THAT(gloo.out,
             ContainsSubstring(tag(0) + "rank 0: steady state per step: hits 0 negotiated 100"));
  CHECK(bits_decided(gloo, 0) == 0);
  // Small synchronous calls: reduced by rank 0 from the inputs sent with their requests.
  CHECK(eager_calls(gloo, 0) >= 1);
  CHECK(checksum(gloo) == bits);
}

TEST_CASE(
    "engine in cycles (--mpi, native with HOROVOD_GLOO_CYCLES=1): a frozen rank 0 fails the "
    "others with PEER_LOST, a frozen rank 1 is a stall rank 0 names and ends",
    "[engine]") {
  const Mode mode = GENERATE(Mode::kMpi, Mode::kGlooCycles);
  INFO(engine_name(mode));
  // libhvd_check freeze R: rank R stops itself (SIGSTOP) in the 4th allreduce. A frozen process
  // never joins a negotiation cycle: rank 1 hears nothing from rank 0 for the Gloo timeout,
  // rank 0 sees its cycle never complete. Then the failed rank exits at once (no MPI_Finalize,
  // which would wait for the frozen one), and mpirun ends the job.
  const auto frozen0 = run_local(2, {"freeze", "0"}, {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "3"}}, mode);
  INFO("freeze 0\n" << show(frozen0));
  CHECK(frozen0.exit_code == 3);
  CHECK_THAT(
      frozen0.out,
      ContainsSubstring(tag(1) + "rank 1: error after") &&
          ContainsSubstring("(status HVD_ERR_PEER_LOST)") &&
          ContainsSubstring("rank 0 (the coordinator) has not been heard from for 3 s while this "
                            "rank waits on 'hvd.allreduce.3'"));

  const auto frozen1 = run_local(
      2, {"freeze", "1"},
      {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "3"}},
      mode);
  INFO("freeze 1\n" << show(frozen1));
  CHECK(frozen1.exit_code == (mode == Mode::kMpi ? 3 : 76));  // 76: hvdrun's stall verdict
  // What rank 0 says depends on the moment rank 1 froze, which load moves (each seen in CI or
  // under busy loops beside the test):
  // - before rank 1's engine answered the doorbell of the 4th call's cycle: that cycle was never
  //   joined, "rank(s) 1 did not answer its doorbell";
  // - after its engine answered but before it joined: the same cycle, "some rank has not joined it
  //   although rung" (rank 0 knows who answered, not who is missing from an MPI collective);
  // - after its engine joined that cycle with nothing (printing "freezing" took over the 1 ms
  //   doorbell delay): the tensor rank 1 never submitted.
  // Each warns at 1 s and fails rank 0 at 3 s, naming the 4th call.
  const auto has = [](const std::string& text, const std::string& what) {
    return text.find(what) != std::string::npos;
  };
  const auto cycle_told = [&](const std::string& text, const std::string& before) {
    return has(text, before + "negotiation cycle") &&
           (has(text, "(it brought 'hvd.allreduce.3'): rank(s) 1 did not answer its doorbell") ||
            has(text, "(it brought 'hvd.allreduce.3'): some rank has not joined it although rung"));
  };
  CHECK((cycle_told(frozen1.err, "[hvd rank 0] warning: stall: rank 0 has waited 1 s in ") ||
         has(frozen1.err,
             "[hvd rank 0] warning: stall: rank 1 has not submitted tensor 'hvd.allreduce.3'")));
  const std::string fatal = "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (3 s): ";
  CHECK_THAT(frozen1.out, ContainsSubstring(tag(0) + "rank 0: error after"));
  CHECK((cycle_told(frozen1.out, fatal) ||
         has(frozen1.out, fatal + "tensor 'hvd.allreduce.3' was never submitted by rank(s) 1")));
}
