// rank_info: prints where this process sits in an hvdrun job, read from the launcher<->rank
// contract (HOROVOD_* variables), or under `hvdrun --mpi` (and plain mpirun) from Open MPI's
// OMPI_COMM_WORLD_* variables. Run alone, it says it is a single process.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "common/error.h"
#include "contract/topology.h"

int main() {
  try {
    const auto topology = hvd::contract::read_topology(std::getenv);
    if (!topology && std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) {
      auto var = [](const char* name) {
        const char* value = std::getenv(name);
        return value != nullptr ? value : "?";
      };
      std::printf("rank %s of %s: local rank %s of %s (from Open MPI: hvdrun --mpi or mpirun)\n",
                  var("OMPI_COMM_WORLD_RANK"), var("OMPI_COMM_WORLD_SIZE"),
                  var("OMPI_COMM_WORLD_LOCAL_RANK"), var("OMPI_COMM_WORLD_LOCAL_SIZE"));
      return 0;
    }
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
