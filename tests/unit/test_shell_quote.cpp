#include <cstdio>
#include "tests/support/catch.h"

#include "common/shell_quote.h"

using hvd::shell_join;
using hvd::shell_quote;

namespace {

// What /bin/sh makes of `printf %s WORD`: the real shell is the judge of quoting.
std::string through_sh(const std::string& quoted) {
  const std::string cmd = "printf %s " + quoted;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[256];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  REQUIRE(pclose(pipe) == 0);
  return out;
}

}  // namespace

TEST_CASE("shell_quote leaves plain words alone", "[quote]") {
  CHECK(shell_quote("./train") == "./train");
  CHECK(shell_quote("--lr=0.1") == "--lr=0.1");
  CHECK(shell_quote("user@10.0.0.1:22") == "user@10.0.0.1:22");
}

TEST_CASE("shell_quote survives hostile strings through a real sh", "[quote]") {
  const std::vector<std::string> hostile{
      "",           "a b",         "it's",      "'",         "''",    "$HOME", "$(id)", "`id`",
      "a;rm -rf /", "a|b&c>d<e",   "new\nline", "tab\there", "\\",    "\"q\"", "*",     "~",
      "#comment",   "a\xff\xfe b", "--x='y'",   "!event",    "{a,b}", "-n",    "x\x01y"};
  for (const std::string& s : hostile) {
    INFO("word: " << s << " quoted: " << shell_quote(s));
    CHECK(through_sh(shell_quote(s)) == s);
  }
}

TEST_CASE("shell_join quotes each word", "[quote]") {
  CHECK(shell_join({"./x", "a b", "it's"}) == "./x 'a b' 'it'\\''s'");
  CHECK(shell_join({}).empty());
}
