/* A small MPI program for hvdrun --mpi tests: every rank reports its rank, the size, the sum of
 * all ranks from MPI_Allreduce, and the host it was started on (SSH_CONNECTION's server address,
 * which the rank inherits from its Open MPI daemon). `mpi_check FAIL_RANK CODE` makes that rank
 * exit with CODE after the allreduce. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char server[64] = "-";
  const char* conn = getenv("SSH_CONNECTION");
  if (conn != NULL) sscanf(conn, "%*s %*s %63s", server);
  printf("rank %d of %d sum %d host %s %s\n", rank, size, sum, server,
         sum == size * (size - 1) / 2 ? "ok" : "WRONG");
  fflush(stdout);
  if (argc > 2 && atoi(argv[1]) == rank) {
    fprintf(stderr, "rank %d fails on purpose\n", rank);
    fflush(stderr);
    MPI_Finalize();
    return atoi(argv[2]);
  }
  MPI_Finalize();
  return 0;
}
