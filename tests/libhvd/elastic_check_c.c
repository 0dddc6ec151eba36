/* elastic_check in C, through libhvd's C API (hvd/hvd.h): the same training loop and the same
 * output as tests/libhvd/elastic_check.cpp, so tests/e2e/test_launch_elastic.cpp checks both the
 * same way. STEPS steps over 1000 weights and a step counter registered with an
 * hvd_elastic_state, a commit every step; each step allreduces a gradient of ones (average) and
 * adds (step + 1) * mean to every weight: every weight ends at STEPS * (STEPS + 1) / 2 when no
 * step was skipped or repeated, whatever the world's size was.
 *
 *   elastic_check_c STEPS [DIE_WORKER DIE_STEP]   worker DIE_WORKER SIGKILLs itself after the
 *                                                  allreduce of step DIE_STEP in generation 0 */
#include <hvd/hvd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define WEIGHTS 1000

struct loop {
  float weights[WEIGHTS];
  long long step;
  long long steps;
  int die_worker;
  long long die_step;
  hvd_elastic_state* state;
};

static int train(void* user) {
  struct loop* l = user;
  int generation = 0, worker = 0, rank = 0, size = 0;
  hvd_status s = hvd_elastic_world(&generation, &worker, NULL);
  if (s == HVD_OK) s = hvd_rank(&rank);
  if (s == HVD_OK) s = hvd_size(&size);
  if (s != HVD_OK) return s;
  printf("worker %d: generation %d rank %d size %d from step %lld\n", worker, generation, rank,
         size, l->step);
  fflush(stdout);
  while (l->step < l->steps) {
    float grad[WEIGHTS];
    for (int i = 0; i < WEIGHTS; ++i) grad[i] = 1.0f;
    s = hvd_allreduce(grad, grad, WEIGHTS, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0);
    if (s != HVD_OK) return s; /* PEER_LOST: hvd_elastic_run resets and calls train again */
    for (int i = 0; i < WEIGHTS; ++i) l->weights[i] += (float)(l->step + 1) * grad[i];
    ++l->step;
    if (worker == l->die_worker && l->step == l->die_step && generation == 0) raise(SIGKILL);
    s = hvd_elastic_commit(l->state);
    if (s != HVD_OK) return s; /* HOSTS_UPDATED: the same */
  }
  return HVD_OK;
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    fprintf(stderr, "usage: elastic_check_c STEPS [DIE_WORKER DIE_STEP]\n");
    return 2;
  }
  static struct loop l;
  l.steps = atoll(argv[1]);
  l.die_worker = argc == 4 ? atoi(argv[2]) : -1;
  l.die_step = argc == 4 ? atoll(argv[3]) : -1;
  hvd_status s = hvd_init();
  if (s == HVD_OK) s = hvd_elastic_state_new(&l.state);
  if (s == HVD_OK) s = hvd_elastic_state_add(l.state, "weights", l.weights, sizeof l.weights);
  if (s == HVD_OK) s = hvd_elastic_state_add(l.state, "step", &l.step, sizeof l.step);
  if (s == HVD_OK) s = hvd_elastic_run(l.state, train, &l);
  int generation = 0, worker = 0, resets = 0, rank = 0, size = 0;
  if (s == HVD_OK) s = hvd_elastic_world(&generation, &worker, &resets);
  if (s == HVD_OK) s = hvd_rank(&rank);
  if (s == HVD_OK) s = hvd_size(&size);
  if (s != HVD_OK) {
    printf("libhvd error (%s): %s\n", hvd_status_name(s), hvd_last_error());
    fflush(stdout);
    return 3;
  }
  double sum = 0;
  for (int i = 0; i < WEIGHTS; ++i) sum += l.weights[i];
  printf("worker %d done: generation %d rank %d size %d resets %d steps %lld weights %.1f\n",
         worker, generation, rank, size, resets, l.step, sum / WEIGHTS);
  fflush(stdout);
  hvd_elastic_state_free(l.state);
  hvd_shutdown();
  return 0;
}
