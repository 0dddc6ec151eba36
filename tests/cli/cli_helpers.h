// Shared helpers for the CLI end-to-end tests: run the real hvdrun and check what it says.
#pragma once

#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>
#include "tests/support/catch.h"

#include "tests/cli/process.h"

namespace hvd::test {

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;
using nlohmann::json;
using Env = std::vector<std::pair<std::string, std::string>>;

inline constexpr int kSuccess = 0;
inline constexpr int kUsage = 64;
inline constexpr int kInternal = 70;

// Everything about a run, for INFO() so that a failed check shows what hvdrun said.
inline std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out +
         "\n--- stderr ---\n" + r.err;
}

inline std::vector<std::string> with_prefix(std::vector<std::string> prefix,
                                            const std::vector<std::string>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

inline json parse_stdout(const RunResult& r) {
  INFO(show(r));
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(r.out));
  return doc;
}

// `hvdrun --dry-run --json ARGS`, which must succeed; returns the parsed plan.
inline json dry_run_json(const std::vector<std::string>& args, const Env& env = {}) {
  const RunResult r = run_hvdrun(with_prefix({"--dry-run", "--json"}, args), env);
  INFO(show(r));
  REQUIRE(r.exit_code == kSuccess);
  return parse_stdout(r);
}

// A usage error: exit 64, nothing on stdout, one "hvdrun: error:" message naming each needle.
inline RunResult expect_usage_error(const std::vector<std::string>& args,
                                    const std::vector<std::string>& needles, const Env& env = {}) {
  const RunResult r = run_hvdrun(args, env);
  INFO(show(r));
  CHECK(r.exit_code == kUsage);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, StartsWith("hvdrun: error: "));
  for (const std::string& needle : needles) CHECK_THAT(r.err, ContainsSubstring(needle));
  return r;
}

// A fresh, empty folder $TMPDIR/hvd_cli_NAME (what an earlier run left there is removed).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("hvd_cli_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `text` to `path` (executable by its owner when asked) and returns the path.
inline std::filesystem::path write_test_file(const std::filesystem::path& path,
                                             const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) {
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
  }
  return path;
}

// Whether `argv` (a JSON array of words) holds `words` in a row.
inline bool has_words(const json& argv, const std::vector<std::string>& words) {
  for (size_t i = 0; i + words.size() <= argv.size(); ++i) {
    bool all = true;
    for (size_t k = 0; k < words.size() && all; ++k) all = argv[i + k] == words[k];
    if (all) return true;
  }
  return false;
}

inline std::string current_user() {
  const passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "root";
}

// A file with `content` in $TMPDIR (or /tmp), removed when the test ends.
class TempFile {
 public:
  explicit TempFile(std::string_view content) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/hvd-cli-test-XXXXXX";
    const int fd = mkstemp(path_.data());
    REQUIRE(fd >= 0);
    const bool written =
        ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
    ::close(fd);
    REQUIRE(written);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace hvd::test
