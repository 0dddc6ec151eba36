/* A C99 program outside the hvdrun tree that uses only the installed hvd/hvd.h, built with
 *   gcc -std=c99 -Wall -Werror c_consumer.c $(pkg-config --cflags --libs hvd)
 * Runs alone (size 1) or under hvdrun at any size. Prints "c_consumer: rank R of S backend B
 * allreduce allgather reducescatter OK" when every check passes. Exit status: 0 passed, 1 a check
 * failed. */
#include <hvd/hvd.h>

#include <stdio.h>
#include <stdlib.h>

static int failures = 0;

static void fail(const char* what, hvd_status status) {
  fprintf(stderr, "c_consumer: %s: %s (%s)\n", what, hvd_status_name(status), hvd_last_error());
  ++failures;
}

/* An hvd_alloc_fn: malloc, remembering the block in *user for the caller to free. */
static void* malloc_output(size_t bytes, void* user) {
  void* block = malloc(bytes > 0 ? bytes : 1);
  *(void**)user = block;
  return block;
}

int main(void) {
  int rank = -1, size = 0, i;
  hvd_status status;
  double values[3] = {1.0, 2.0, 3.0};
  double mine[2];
  double* gathered = NULL;
  size_t gathered_count = 0;
  double* scattered = NULL;
  size_t scattered_count = 0;
  double* block = NULL;
  const char* backend;

  status = hvd_rank(&rank);
  if (status != HVD_ERR_NOT_INITIALIZED) {
    fprintf(stderr,
            "c_consumer: hvd_rank before hvd_init returned %s, expected "
            "HVD_ERR_NOT_INITIALIZED\n",
            hvd_status_name(status));
    return 1;
  }
  if (hvd_last_error() == NULL || hvd_last_error()[0] == '\0') {
    fprintf(stderr, "c_consumer: hvd_rank before hvd_init left hvd_last_error() empty\n");
    return 1;
  }
  printf("c_consumer: hvd_rank before hvd_init: %s: %s\n", hvd_status_name(status),
         hvd_last_error());

  status = hvd_init();
  if (status != HVD_OK) {
    fail("hvd_init", status);
    return 1;
  }
  if ((status = hvd_rank(&rank)) != HVD_OK) fail("hvd_rank", status);
  if ((status = hvd_size(&size)) != HVD_OK) fail("hvd_size", status);
  backend = hvd_backend_name();
  if (failures > 0 || size < 1 || backend == NULL) {
    fprintf(stderr, "c_consumer: no topology after hvd_init (size %d)\n", size);
    hvd_shutdown();
    return 1;
  }

  /* Every rank contributes {1, 2, 3}: the sum is {S, 2S, 3S}. */
  status = hvd_allreduce(values, values, 3, HVD_FLOAT64, HVD_SUM, 1.0, 1.0);
  if (status != HVD_OK) {
    fail("hvd_allreduce", status);
  } else {
    for (i = 0; i < 3; ++i) {
      if (values[i] != (i + 1) * (double)size) {
        fprintf(stderr, "c_consumer: hvd_allreduce element %d is %g, expected %g\n", i, values[i],
                (i + 1) * (double)size);
        ++failures;
      }
    }
  }

  /* Rank r contributes {r, r + 0.5}: the result is every rank's pair in rank order. */
  mine[0] = rank;
  mine[1] = rank + 0.5;
  status = hvd_allgather(mine, 2, HVD_FLOAT64, malloc_output, &gathered, &gathered_count);
  if (status != HVD_OK) {
    fail("hvd_allgather", status);
  } else if (gathered == NULL || gathered_count != 2 * (size_t)size) {
    fprintf(stderr, "c_consumer: hvd_allgather gave %lu elements, expected %d\n",
            (unsigned long)gathered_count, 2 * size);
    ++failures;
  } else {
    for (i = 0; i < 2 * size; ++i) {
      double want = (i / 2) + (i % 2) * 0.5;
      if (gathered[i] != want) {
        fprintf(stderr, "c_consumer: hvd_allgather element %d is %g, expected %g\n", i, gathered[i],
                want);
        ++failures;
      }
    }
  }
  free(gathered);

  /* Every rank contributes {0, 1, .., 2S - 1}, prescaled by 0.5 and postscaled by 4 (summed: 2S
   * times each value); rank r receives elements 2r and 2r + 1. The input stays as it was. */
  block = malloc(2 * (size_t)size * sizeof *block);
  if (block == NULL) return 1;
  for (i = 0; i < 2 * size; ++i) block[i] = i;
  status = hvd_reducescatter_scaled(block, 2 * (size_t)size, HVD_FLOAT64, HVD_SUM, 0.5, 4.0,
                                    malloc_output, &scattered, &scattered_count);
  if (status != HVD_OK) {
    fail("hvd_reducescatter_scaled", status);
  } else if (scattered == NULL || scattered_count != 2) {
    fprintf(stderr, "c_consumer: hvd_reducescatter_scaled gave %lu elements, expected 2\n",
            (unsigned long)scattered_count);
    ++failures;
  } else {
    for (i = 0; i < 2; ++i) {
      double want = 2.0 * size * (2 * rank + i);
      if (scattered[i] != want || block[2 * rank + i] != 2 * rank + i) {
        fprintf(stderr, "c_consumer: hvd_reducescatter_scaled element %d is %g, expected %g\n", i,
                scattered[i], want);
        ++failures;
      }
    }
  }
  free(scattered);
  free(block);

  if (failures == 0) {
    printf("c_consumer: rank %d of %d backend %s allreduce allgather reducescatter OK\n", rank,
           size, backend);
  }
  if ((status = hvd_shutdown()) != HVD_OK) fail("hvd_shutdown", status);
  return failures == 0 ? 0 : 1;
}
