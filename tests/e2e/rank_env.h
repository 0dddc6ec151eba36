// The environment hvdrun gives a rank, for tests that play the launcher's part themselves
// (test_libhvd_faults.cpp, test_libhvd_elastic.cpp): rank `rank` of `size` ranks, all on one host
// at 127.0.0.1, meeting at the rendezvous server on `port`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hvd::test {

using Env = std::vector<std::pair<std::string, std::string>>;

inline Env one_host_rank_env(int rank, int size, int port, const std::string& token,
                             const std::string& job_id, int gloo_timeout_seconds) {
  const std::string r = std::to_string(rank), n = std::to_string(size);
  return {{"HOROVOD_RANK", r},
          {"HOROVOD_SIZE", n},
          {"HOROVOD_LOCAL_RANK", r},
          {"HOROVOD_LOCAL_SIZE", n},
          {"HOROVOD_CROSS_RANK", "0"},
          {"HOROVOD_CROSS_SIZE", "1"},
          {"HVD_RENDEZVOUS_ADDR", "127.0.0.1:" + std::to_string(port)},
          {"HVD_RENDEZVOUS_TOKEN", token},
          {"HVD_JOB_ID", job_id},
          {"HVD_ADVERTISE_ADDR", "127.0.0.1"},
          {"HOROVOD_GLOO_TIMEOUT_SECONDS", std::to_string(gloo_timeout_seconds)}};
}

}  // namespace hvd::test
