// The training example's pieces shared by its static loop (train.cpp) and its elastic loop
// (elastic.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "idx.h"
#include "mlp.h"

namespace fmnist {

struct Args {
  int epochs = 3;
  int batch = 32;    // per rank
  float lr = 0.01f;  // per rank; scaled by size
  float momentum = 0.9f;
  int hidden = 128;
  std::string data = kDefaultDir;
  std::string checkpoint;  // empty: none
  bool elastic = false;    // --elastic: hvd::elastic::run with a commit every commit_every steps
  int commit_every = 20;
  // Test and benchmark hooks: rank (worker, with --elastic) kill_rank kills itself after global
  // step kill_step of the first attempt or generation; report_first_step: rank 0 prints when the
  // first step of each attempt or generation is done.
  int kill_rank = -1;
  long long kill_step = -1;
  bool report_first_step = false;
  // --die-in restore|sync:W (with --elastic): worker W kills itself inside State::restore() or
  // State::sync() of the first reset it takes part in (the reset's own failure).
  std::string die_in;  // "restore" or "sync"; empty: no
  int die_in_worker = -1;
  bool help = false;  // --help, -h: print the usage and exit 0
};

// Averages every layer's gradient across ranks: one named async op per layer, then wait.
void average_gradients(Mlp& model);
// Rank 0's parameters to every rank.
void broadcast_parameters(Mlp& model);
// True when every rank's parameters hash the same.
bool same_everywhere(std::uint64_t checksum);
// The test set's accuracy in percent, each rank scoring its share.
double test_accuracy(Mlp& model, const Dataset& test);

// Unix time in seconds (comparable between processes on one machine: the benchmarks use it).
double wall_seconds();
// Prints "<who> <id>: killing myself (SIGKILL) after step S at T" and raises SIGKILL.
[[noreturn]] void die_here(const char* who, int id, long long step);

// The elastic loop (--elastic); returns the exit code.
int train_elastic(const Args& args);

}  // namespace fmnist
