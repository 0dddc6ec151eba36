// Ranks of a real launch reach the launcher's rendezvous server with the job's token, from the
// HVD_RENDEZVOUS_* variables alone (bash's /dev/tcp as the HTTP client), and are refused without
// it.
#include "tests/support/catch.h"

#include "tests/cli/process.h"

using Catch::Matchers::ContainsSubstring;
using hvd::test::run_hvdrun;

namespace {

// Each rank PUTs its rank under its own key, GETs it back, and tries a wrong token.
constexpr const char* kRankScript = R"SH(
host=${HVD_RENDEZVOUS_ADDR%:*}; port=${HVD_RENDEZVOUS_ADDR##*:}
req() {
  exec 3<>"/dev/tcp/$host/$port" || exit 9
  printf '%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$1" "$2" "$4" "${#3}" "$3" >&3
  tr -d '\r' <&3 | sed -n '1p;$p' | tr '\n' ' '
  exec 3<&-
}
echo "put=$(req PUT /job/r$RANK value-$RANK "$HVD_RENDEZVOUS_TOKEN")"
echo "get=$(req GET /job/r$RANK '' "$HVD_RENDEZVOUS_TOKEN")"
echo "bad=$(req GET /job/r$RANK '' not-the-token)"
)SH";

}  // namespace

TEST_CASE("ranks reach the rendezvous server with the job token", "[launch][rendezvous]") {
  const auto r = run_hvdrun({"-np", "2", "bash", "-c", kRankScript});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  for (int rank : {0, 1}) {
    const std::string tag = "[1," + std::to_string(rank) + "]<stdout>:";
    CHECK_THAT(r.out, ContainsSubstring(tag + "put=HTTP/1.1 200 OK"));
    CHECK_THAT(r.out, ContainsSubstring(tag + "get=HTTP/1.1 200 OK value-" + std::to_string(rank)));
    CHECK_THAT(r.out, ContainsSubstring(tag + "bad=HTTP/1.1 401 Unauthorized"));
  }
}

TEST_CASE("the rendezvous token is set for ranks but never shown", "[launch][rendezvous]") {
  const auto r =
      run_hvdrun({"-np", "1", "sh", "-c", "echo ${#HVD_RENDEZVOUS_TOKEN} $HVD_RENDEZVOUS_ADDR"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:64 127.0.0.1:"));
  const auto dry = run_hvdrun({"--dry-run", "--json", "--show-env-values", "-np", "1", "true"});
  CHECK_THAT(dry.out, ContainsSubstring("\"HVD_RENDEZVOUS_TOKEN\": \"<redacted>\""));
}
