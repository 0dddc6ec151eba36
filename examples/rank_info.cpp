// rank_info: prints where this process sits in an hvdrun job, read from the launcher<->rank
// contract (HOROVOD_* variables). Run alone, it says it is a single process.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "common/error.h"
#include "contract/topology.h"

int main() {
  try {
    const auto topology = hvd::contract::read_topology(std::getenv);
    if (!topology) {
      std::printf("rank 0 of 1 (not started by hvdrun: no HOROVOD_RANK)\n");
      return 0;
    }
    const auto& t = *topology;
    std::printf("rank %d of %d: local rank %d of %d, cross rank %d of %d\n", t.rank, t.size,
                t.local_rank, t.local_size, t.cross_rank, t.cross_size);
    return 0;
  } catch (const hvd::Error& e) {
    std::fprintf(stderr, "rank_info: %s\nrank_info: hint: %s\n", e.what(), e.hint().c_str());
    return 2;
  }
}
