// The restart policy (launcher/core/restarts.h), pure: which failures get another attempt, the
// backoff.
#include "tests/support/catch.h"

#include "launcher/core/restarts.h"

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
  // mpirun said a rank failed without naming it: a rank failure all the same.
  LaunchResult unnamed = failed_with(ErrorKind::kRemote);
  unnamed.unnamed_rank_failed = true;
  CHECK_FALSE(why_no_restart(unnamed));
  CHECK_FALSE(why_no_restart(failed_with(ErrorKind::kHostLost)));
  CHECK_FALSE(why_no_restart(failed_with(ErrorKind::kNetCheck)));
  CHECK_FALSE(why_no_restart(ssh_failed(hvd::ssh::CheckCode::kConnectionRefused)));
  CHECK_FALSE(why_no_restart(ssh_failed(hvd::ssh::CheckCode::kTimeout)));

  CHECK(why_no_restart(LaunchResult{}));  // exit 0: nothing to restart
  for (ErrorKind k : {ErrorKind::kUsage, ErrorKind::kTimeout, ErrorKind::kRemote, ErrorKind::kSsh,
                      ErrorKind::kLauncher, ErrorKind::kInternal}) {
    CHECK(why_no_restart(failed_with(k)));
  }
  const auto auth = why_no_restart(ssh_failed(hvd::ssh::CheckCode::kAuthDenied));
  REQUIRE(auth);
  CHECK_THAT(*auth, Catch::Matchers::ContainsSubstring("h2") &&
                        Catch::Matchers::ContainsSubstring("auth_denied"));
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

TEST_CASE("host health: blacklisted after the limit, for a doubling cooldown, then back",
          "[restarts]") {
  using Clock = hvd::launcher::HostHealth::Clock;
  using std::chrono::seconds;
  hvd::launcher::HostHealth health(2, 10, 25);
  const Clock::time_point t0{};
  CHECK_FALSE(health.record_failure("h", t0, 0.0));  // 1 of 2
  CHECK_FALSE(health.blacklisted("h", t0));
  const auto first = health.record_failure("h", t0, 0.0);
  REQUIRE(first);
  CHECK(first->count() == 10000);
  CHECK(health.blacklisted("h", t0 + seconds(9)));
  CHECK_FALSE(health.blacklisted("h", t0 + seconds(10)));
  CHECK_FALSE(health.blacklisted("other", t0));
  CHECK(health.first_back({"other", "h"}, t0) == t0 + seconds(10));
  CHECK_FALSE(health.first_back({"other"}, t0));
  // Back, its count starts again; the second blacklisting doubles, the third is capped, with
  // up to 10% jitter on top.
  const Clock::time_point t1 = t0 + seconds(20);
  CHECK_FALSE(health.record_failure("h", t1, 0.0));
  CHECK(health.record_failure("h", t1, 0.0)->count() == 20000);
  const Clock::time_point t2 = t1 + seconds(30);
  health.record_failure("h", t2, 0.0);
  CHECK(health.record_failure("h", t2, 0.5)->count() == 26250);  // min(40, 25) * 1.05
}

TEST_CASE("host health: what counts against a host", "[restarts]") {
  hvd::launcher::Plan plan;
  plan.hosts.resize(2);
  plan.hosts[0].spec.host = "a";
  plan.hosts[1].spec.host = "b";
  LaunchResult r;
  r.exit_code = 135;
  r.ranks.resize(2);
  r.ranks[1].host_index = 1;
  r.ranks[1].exited = r.ranks[1].signaled = true;
  r.ranks[1].value = 7;  // SIGBUS
  r.first_failure = 1;
  CHECK(hvd::launcher::failing_hosts(plan, r) == std::vector<std::string>{"b"});
  r.ranks[1].value = 11;  // SIGSEGV: the program's, not the host's
  CHECK(hvd::launcher::failing_hosts(plan, r).empty());
  r.lost_hosts = {"a"};
  CHECK(hvd::launcher::failing_hosts(plan, r) == std::vector<std::string>{"a"});
  LaunchResult refused = ssh_failed(hvd::ssh::CheckCode::kConnectionRefused);
  CHECK(hvd::launcher::failing_hosts(plan, refused) == std::vector<std::string>{"h2"});
  CHECK(hvd::launcher::failing_hosts(plan, ssh_failed(hvd::ssh::CheckCode::kAuthDenied)).empty());
}
