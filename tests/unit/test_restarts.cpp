// The restart policy (launcher/restarts.h), pure: which failures get another attempt, the backoff.
#include <catch2/catch.hpp>

#include "launcher/restarts.h"

using hvd::ErrorKind;
using hvd::launcher::backoff_before;
using hvd::launcher::LaunchResult;
using hvd::launcher::RestartPolicy;
using hvd::launcher::why_no_restart;

namespace {

LaunchResult failed_with(ErrorKind kind) {
  LaunchResult r;
  r.exit_code = 1;
  r.error = hvd::Failure{kind, "x", ""};
  return r;
}

LaunchResult ssh_failed(hvd::ssh::CheckCode code) {
  LaunchResult r;
  r.exit_code = 69;
  hvd::ssh::HostCheck h;
  h.host = "h2";
  h.code = code;
  r.ssh_failures.push_back(h);
  return r;
}

}  // namespace

TEST_CASE("restart policy: what is worth another attempt", "[restarts]") {
  LaunchResult rank_failed;
  rank_failed.exit_code = 137;
  rank_failed.ranks.resize(1);
  rank_failed.first_failure = 0;
  CHECK_FALSE(why_no_restart(rank_failed));
  CHECK_FALSE(why_no_restart(failed_with(ErrorKind::kHostLost)));
  CHECK_FALSE(why_no_restart(failed_with(ErrorKind::kNetCheck)));
  CHECK_FALSE(why_no_restart(ssh_failed(hvd::ssh::CheckCode::kConnectionRefused)));
  CHECK_FALSE(why_no_restart(ssh_failed(hvd::ssh::CheckCode::kTimeout)));

  CHECK(why_no_restart(LaunchResult{}));  // exit 0: nothing to restart
  for (ErrorKind k : {ErrorKind::kUsage, ErrorKind::kTimeout, ErrorKind::kRemote,
                      ErrorKind::kSsh, ErrorKind::kLauncher, ErrorKind::kInternal}) {
    CHECK(why_no_restart(failed_with(k)));
  }
  const auto auth = why_no_restart(ssh_failed(hvd::ssh::CheckCode::kAuthDenied));
  REQUIRE(auth);
  CHECK_THAT(*auth, Catch::Matchers::Contains("h2") && Catch::Matchers::Contains("auth_denied"));
  CHECK(why_no_restart(ssh_failed(hvd::ssh::CheckCode::kHostKeyChanged)));
  LaunchResult interrupted = rank_failed;
  interrupted.interrupted_by = 2;
  CHECK(why_no_restart(interrupted));
}

TEST_CASE("restart policy: the backoff doubles from the first restart, capped at 30 s",
          "[restarts]") {
  const RestartPolicy p{.max_restarts = 10, .backoff_seconds = 1.5};
  CHECK(backoff_before(p, 1).count() == 0);
  CHECK(backoff_before(p, 2).count() == 1500);
  CHECK(backoff_before(p, 3).count() == 3000);
  CHECK(backoff_before(p, 4).count() == 6000);
  CHECK(backoff_before(p, 9).count() == 30000);
  CHECK(backoff_before({.max_restarts = 3, .backoff_seconds = 0}, 3).count() == 0);
}
