#include "tests/support/catch.h"

#include <algorithm>

#include "launcher/plan/env_forwarding.h"
#include "test_helpers.h"

using namespace hvd::launcher;
using hvd::test::require_usage_error;

TEST_CASE("forward spec: the three -x forms", "[env]") {
  CHECK(parse_forward_spec("FOO") == ForwardSpec{ForwardSpec::Kind::kName, "FOO", "", "FOO"});
  CHECK(parse_forward_spec("FOO=a=b c") ==
        ForwardSpec{ForwardSpec::Kind::kAssign, "FOO", "a=b c", "FOO=a=b c"});
  CHECK(parse_forward_spec("FOO=") == ForwardSpec{ForwardSpec::Kind::kAssign, "FOO", "", "FOO="});
  CHECK(parse_forward_spec("MYAPP_*") ==
        ForwardSpec{ForwardSpec::Kind::kPrefix, "MYAPP_", "", "MYAPP_*"});
  CHECK(parse_forward_spec("_X1").name == "_X1");
}

TEST_CASE("forward spec errors name the variable and the rule", "[env]") {
  require_usage_error([] { parse_forward_spec("1FOO"); },
                      "-x '1FOO': '1FOO' is not a valid environment variable name",
                      "not starting with a digit");
  require_usage_error([] { parse_forward_spec("A-B"); }, "'A-B' is not a valid");
  require_usage_error([] { parse_forward_spec(""); }, "'' is not a valid");
  require_usage_error([] { parse_forward_spec("=x"); }, "'' is not a valid");
  require_usage_error([] { parse_forward_spec("A*B"); }, "'A*B' is not a valid");
  require_usage_error([] { parse_forward_spec("HVD_TOKEN"); },
                      "-x HVD_TOKEN: HVD_* variables are reserved for hvdrun itself");
  require_usage_error([] { parse_forward_spec("HVD_*"); }, "reserved for hvdrun");
  require_usage_error([] { parse_forward_spec("HOROVOD_RANK=3"); },
                      "-x HOROVOD_RANK=3: HOROVOD_RANK is set by hvdrun for each rank",
                      "docs/environment.md");
  require_usage_error([] { parse_forward_spec("MASTER_PORT"); }, "set by hvdrun for each rank");
  require_usage_error([] { parse_forward_spec("TERM"); },
                      "-x TERM: TERM belongs to this terminal or login session");
  require_usage_error([] { parse_forward_spec("SSH_AUTH_SOCK"); }, "never forwarded");
  require_usage_error([] { parse_forward_spec("SSH_*"); }, "never forwarded");
  require_usage_error([] { parse_forward_spec("HOME=/x"); }, "HOME belongs");
}

TEST_CASE("session and reserved variables are recognised", "[env]") {
  for (const char* n : {"SSH_CONNECTION", "SSH_AUTH_SOCK", "TERM", "DISPLAY", "TMUX", "HOME",
                        "USER", "SHLVL", "XDG_RUNTIME_DIR", "_"}) {
    INFO(n);
    CHECK(is_session_variable(n));
  }
  for (const char* n : {"PATH", "TERMINAL_WIDTH_X", "MY_HOME", "HOROVOD_X"}) {
    INFO(n);
    CHECK_FALSE(is_session_variable(n));
  }
}

TEST_CASE("forwarding: allow-list by default, nothing else", "[env]") {
  const EnvList env{{"PATH", "/bin"},
                    {"LD_LIBRARY_PATH", "/l"},
                    {"PYTHONPATH", "/p"},
                    {"PYTHONUNBUFFERED", "0"},
                    {"CUDA_VISIBLE_DEVICES", "0"},
                    {"NCCL_DEBUG", "INFO"},
                    {"OMP_NUM_THREADS", "2"},
                    {"HOROVOD_FUSION_THRESHOLD", "1"},
                    {"HOROVOD_RANK", "5"},
                    {"HVD_JOB_ID", "x"},
                    {"SSH_AUTH_SOCK", "/s"},
                    {"TERM", "xterm"},
                    {"MY_SECRET", "s"},
                    {"PATHS", "no"},
                    {"CUDAX", "no"}};
  const ForwardResult r = forward_environment({}, env);
  std::vector<std::string> names;
  for (const auto& v : r.vars) {
    names.push_back(v.name);
    CHECK_FALSE(v.explicit_spec);
  }
  CHECK(names == std::vector<std::string>{"CUDA_VISIBLE_DEVICES", "HOROVOD_FUSION_THRESHOLD",
                                          "LD_LIBRARY_PATH", "NCCL_DEBUG", "OMP_NUM_THREADS",
                                          "PATH", "PYTHONPATH", "PYTHONUNBUFFERED"});
  CHECK(r.warnings.empty());
  CHECK(r.not_forwarded == 7);  // HOROVOD_RANK, HVD_JOB_ID, SSH_AUTH_SOCK, TERM, MY_SECRET, ...
  CHECK_FALSE(r.everything);
}

TEST_CASE("forwarding: -x adds by name, value, prefix, later wins", "[env]") {
  const EnvList env{{"MY_SECRET", "s"},
                    {"MYAPP_A", "1"},
                    {"MYAPP_B", "2"},
                    {"MYAPP_HOME", "h"},
                    {"PATH", "/bin"}};
  const ForwardResult r = forward_environment(
      {parse_forward_spec("MY_SECRET"), parse_forward_spec("MYAPP_*"),
       parse_forward_spec("MYAPP_B=override"), parse_forward_spec("PATH=/opt/bin"),
       parse_forward_spec("MISSING"), parse_forward_spec("NOMATCH_*")},
      env);
  auto get = [&](const std::string& n) -> const ForwardedVar* {
    for (const auto& v : r.vars) {
      if (v.name == n) return &v;
    }
    return nullptr;
  };
  REQUIRE(get("MY_SECRET") != nullptr);
  CHECK(get("MY_SECRET")->explicit_spec);
  CHECK(get("MYAPP_A")->value == "1");
  CHECK(get("MYAPP_B")->value == "override");
  CHECK(get("MYAPP_HOME")->value == "h");  // only the exact name HOME is a session variable
  CHECK(get("PATH")->value == "/opt/bin");
  CHECK(get("PATH")->explicit_spec);
  CHECK(get("MISSING") == nullptr);
  REQUIRE(r.warnings.size() == 2);
  CHECK(r.warnings[0] == "-x MISSING: not set in hvdrun's environment, so not forwarded");
  CHECK(r.warnings[1] == "-x 'NOMATCH_*': no variable in hvdrun's environment matches");
}

TEST_CASE("forwarding: a prefix never picks up reserved or per-rank names", "[env]") {
  const EnvList env{{"HOROVOD_RANK", "5"}, {"HOROVOD_CYCLE_TIME", "1"}};
  const ForwardResult r = forward_environment({parse_forward_spec("HOROVOD_*")}, env);
  REQUIRE(r.vars.size() == 1);
  CHECK(r.vars[0].name == "HOROVOD_CYCLE_TIME");
}

TEST_CASE("forwarding: values are bytes", "[env]") {
  const std::string bytes = std::string("a\nb\xff\x01", 5);
  const ForwardResult r = forward_environment({parse_forward_spec("X=" + bytes)}, {});
  REQUIRE(r.vars.size() == 1);
  CHECK(r.vars[0].value == bytes);
}

// horovodrun forwards its whole environment; -x '*' is hvdrun's way to ask for that.
TEST_CASE("forwarding: -x '*' forwards all but session, hvdrun's and per-rank names", "[env]") {
  const ForwardSpec all = parse_forward_spec("*");
  CHECK(all.kind == ForwardSpec::Kind::kPrefix);
  CHECK(all.name.empty());
  const EnvList env{{"PATH", "/bin"},       {"MY_SECRET", "s"},
                    {"DATA_DIR", "/data"},  {"HOROVOD_RANK", "5"},
                    {"HVD_JOB_ID", "x"},    {"SSH_AUTH_SOCK", "/s"},
                    {"TERM", "xterm"},      {"BASH_FUNC_f%%", "() {  echo hi\n}"},
                    {"MASTER_PORT", "1234"}};
  const ForwardResult r = forward_environment({all}, env);
  std::vector<std::string> names;
  for (const auto& v : r.vars) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"DATA_DIR", "MY_SECRET", "PATH"});
  CHECK(r.everything);
  CHECK(r.not_forwarded == 6);
  CHECK(r.invalid_names == 1);  // BASH_FUNC_f%%: skipped and counted, not an error
  CHECK(r.warnings.empty());
  // A later -x NAME=value still wins over the inherited value.
  const ForwardResult w = forward_environment({all, parse_forward_spec("DATA_DIR=/other")}, env);
  const auto it = std::find_if(w.vars.begin(), w.vars.end(),
                               [](const ForwardedVar& v) { return v.name == "DATA_DIR"; });
  REQUIRE(it != w.vars.end());
  CHECK(it->value == "/other");
}
