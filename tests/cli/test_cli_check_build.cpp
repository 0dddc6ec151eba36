// hvdrun --check-build: build-time facts and what works on this host now, from libhvd loaded at
// run time (no GPU on the CI machines: zero GPUs, with the reason). And --gpus-per-rank.
#include <regex>

#include "tests/cli/cli_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers

TEST_CASE("check-build: --json reports the engines, NCCL, CUDA and the GPUs", "[cli]") {
  const RunResult r = run_hvdrun({"--check-build", "--json"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json doc = parse_stdout(r);
  CHECK(doc["schema_version"] == 1);
  CHECK(doc["launch_modes"]["native"] == true);
  const json& lib = doc["libhvd"];
  REQUIRE_FALSE(lib.contains("error"));
  CHECK(lib["engines"]["mpi"]["built"] == (HVD_TEST_HAS_MPI != 0));
  CHECK(lib["engines"]["gloo"]["built"] == (HVD_TEST_HAS_GLOO != 0));
  CHECK(lib["engines"]["nccl"]["built"] == (HVD_TEST_HAS_NCCL != 0));
  if (HVD_TEST_HAS_MPI != 0) {
    CHECK(doc["launch_modes"]["mpi"]["available"] == true);
    CHECK_THAT(lib["engines"]["mpi"]["library"].get<std::string>(), ContainsSubstring("Open MPI"));
  }
  if (HVD_TEST_HAS_NCCL != 0 && lib["engines"]["nccl"]["loaded"] == true) {
    // The version the loaded library reports, e.g. "2.28.9".
    CHECK(std::regex_match(lib["engines"]["nccl"]["version"].get<std::string>(),
                           std::regex(R"(\d+\.\d+\.\d+)")));
    CHECK(std::regex_match(lib["cuda_runtime"].get<std::string>(), std::regex(R"(\d+\.\d+)")));
  }
  const json& gpus = lib["gpus"];
  if (gpus["count"] == 0) {
    REQUIRE(gpus.contains("reason"));  // driver missing and no device both come with a reason
    CHECK_FALSE(gpus["reason"].get<std::string>().empty());
  }
}

TEST_CASE("check-build: a human report", "[cli]") {
  const RunResult r = run_hvdrun({"--check-build"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  CHECK_THAT(r.out, ContainsSubstring("native launch      yes"));
  CHECK_THAT(r.out, ContainsSubstring("NCCL plugin        "));
  CHECK_THAT(r.out, ContainsSubstring("GPUs visible       "));
}

TEST_CASE("check-build: the Python binding, in the Python it was built for", "[cli]") {
  const RunResult r = run_hvdrun({"--check-build", "--json"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json py = parse_stdout(r)["python_binding"];
  INFO(py.dump(2));
  REQUIRE(py["built"] == (HVD_TEST_HAS_PYTHON != 0));
  if (HVD_TEST_HAS_PYTHON == 0) return;
  const json& built_for = py["interpreters"][0];
  CHECK(built_for["python"] == HVD_TEST_PYTHON);
  CHECK_FALSE(built_for.contains("on_path"));
  // A build tree's hvdrun finds the build tree's packages.
  CHECK(built_for["pythonpath"] == HVD_TEST_BUILD_DIR "/python");
  if (built_for["importable"] == true) {
    CHECK(built_for["module"] == HVD_TEST_BUILD_DIR "/python/hvd/torch/__init__.py");
    CHECK_FALSE(built_for["torch"].get<std::string>().empty());
  } else {  // no python3-torch on this machine: the reason says so
    CHECK_THAT(built_for["error"].get<std::string>(), ContainsSubstring("torch"));
  }
}

TEST_CASE("check-build: a python3 on PATH that is not the binding's is probed and named", "[cli]") {
  if (HVD_TEST_HAS_PYTHON == 0) {
    WARN("skipped: this build has no Python binding (python3-dev, pybind11-dev)");
    return;
  }
  // A python3 first on PATH (as pyenv's shim) that cannot import anything.
  const auto dir = fresh_dir("check_build_python");
  write_test_file(dir / "python3",
                  "#!/bin/sh\necho 'pyenv: python3: command not found' >&2\nexit 127\n", true);
  const std::string path = dir.string() + ":" + std::getenv("PATH");
  const RunResult r = run_hvdrun({"--check-build", "--json"}, {{"PATH", path}});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);  // a report, not a verdict
  const json py = parse_stdout(r)["python_binding"];
  INFO(py.dump(2));
  REQUIRE(py["interpreters"].size() == 2);
  const json& other = py["interpreters"][1];
  CHECK(other["python"] == (dir / "python3").string());
  CHECK(other["on_path"] == true);
  CHECK(other["importable"] == false);
  CHECK_THAT(other["error"].get<std::string>(),
             ContainsSubstring("exit 127: pyenv: python3: command not found"));
  const RunResult human = run_hvdrun({"--check-build"}, {{"PATH", path}});
  CHECK_THAT(human.out, ContainsSubstring("python3 on PATH    " + (dir / "python3").string() +
                                          ": not importable: exit 127"));
  CHECK_THAT(human.out, ContainsSubstring("name " HVD_TEST_PYTHON " in the command"));
}

TEST_CASE("gpus-per-rank: gives each local rank its own CUDA devices", "[cli]") {
  const RunResult r = run_hvdrun(
      {"--dry-run", "--json", "--gpus-per-rank", "2", "-np", "3", "-H", "a:2,b:1", "./train"});
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  const json plan = parse_stdout(r);
  CHECK(plan["ranks"][0]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1");
  CHECK(plan["ranks"][1]["env"]["CUDA_VISIBLE_DEVICES"] == "2,3");
  CHECK(plan["ranks"][2]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1");  // host b's local rank 0
}

TEST_CASE("gpus-per-rank: refused with --mpi and for a bad count", "[cli]") {
  const RunResult mpi = run_hvdrun({"--dry-run", "--mpi", "--gpus-per-rank", "1", "./train"});
  CHECK(mpi.exit_code == kUsage);
  CHECK_THAT(mpi.err, ContainsSubstring("--gpus-per-rank works in native mode only"));
  const RunResult zero = run_hvdrun({"--dry-run", "--gpus-per-rank", "0", "./train"});
  CHECK(zero.exit_code == kUsage);
  CHECK_THAT(zero.err, ContainsSubstring("--gpus-per-rank 0: must be 1 to 64"));
}
