// Starting one rank: its own process group, exactly the given environment and directory, stdin
// from /dev/null, stdout and stderr to pipes, and a parent-death signal so that it dies with the
// agent. An exec or chdir failure is reported through a close-on-exec pipe, so "no such file"
// is a clear error instead of exit code 127.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace hvd::worker {

struct SpawnedRank {
  pid_t pid = -1;  // also the process group id
  UniqueFd out;    // read ends
  UniqueFd err;
  std::string error;  // non-empty: nothing was started
};

// `env` holds NAME=value strings. Never throws.
SpawnedRank spawn_rank(const std::vector<std::string>& argv, const std::string& cwd,
                       const std::vector<std::string>& env);

}  // namespace hvd::worker
