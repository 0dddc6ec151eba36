// A rank whose Gloo peer dies while it is writing to it must see HVD_ERR_PEER_LOST, not die of
// SIGPIPE: Debian's Gloo writes with writev(), which raises SIGPIPE on a connection the peer
// reset, and a C++ training program keeps SIGPIPE's default action (end the process). An elastic
// job's survivor once died that way (128+13) before it could join the next generation.
// GlooBackend blocks SIGPIPE around its own calls and in the threads Gloo starts, so the write
// fails with EPIPE and the collective with PEER_LOST. The race itself (a peer's FIN not yet read
// when the next write goes out) could not be produced on demand here, so this checks the masks:
// of the threads Gloo starts, and of the caller once GlooBackend returns.
#include "tests/support/catch.h"

#if HVD_TEST_HAS_GLOO
#include <gloo/rendezvous/hash_store.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "allreduce/backends/gloo_backend.h"

namespace {

using hvd::runtime::GlooBackend;

GlooBackend make_rank(gloo::rendezvous::Store& store, int rank, int size) {
  return GlooBackend({.rank = rank,
                      .size = size,
                      .bind_address = "127.0.0.1",
                      .timeout = std::chrono::milliseconds(10000)},
                     store, "an in-process store");
}

std::set<std::string> tasks() {
  std::set<std::string> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    ids.insert(e.path().filename().string());
  }
  return ids;
}

// Whether SIGPIPE is in the blocked mask of thread `tid` of this process (/proc's SigBlk).
bool sigpipe_blocked(const std::string& tid) {
  std::ifstream status("/proc/self/task/" + tid + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigBlk:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return ((mask >> (SIGPIPE - 1)) & 1ULL) != 0;
    }
  }
  return false;
}

bool caller_blocks_sigpipe() {
  sigset_t now;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, SIGPIPE) == 1;
}

}  // namespace

TEST_CASE("gloo: the threads Gloo starts block SIGPIPE, the caller's mask is left as it was",
          "[libhvd]") {
  REQUIRE_FALSE(caller_blocks_sigpipe());
  const std::set<std::string> before = tasks();
  gloo::rendezvous::HashStore store;
  GlooBackend gloo = make_rank(store, 0, 1);
  std::vector<std::string> started;
  for (const std::string& t : tasks()) {
    if (before.count(t) == 0) started.push_back(t);
  }
  REQUIRE_FALSE(started.empty());  // Gloo's TCP device runs its own event loop thread
  for (const std::string& t : started) {
    INFO("thread " << t);
    CHECK(sigpipe_blocked(t));
  }
  float one = 1.0f;
  gloo.allreduce(&one, 1, hvd::DataType::kFloat32, hvd::ReduceOp::kSum);
  CHECK(one == 1.0f);
  CHECK_FALSE(caller_blocks_sigpipe());  // the program's own SIGPIPE behaviour is untouched
}

#else
TEST_CASE("gloo: SIGPIPE checks skipped: this build has no Gloo", "[libhvd]") {
  WARN("skipped: libhvd is built without Gloo (HVD_BUILD_HAS_GLOO=0)");
}
#endif
