// A training checkpoint for restarts (`hvdrun --max-restarts`): the epochs done, and the model's
// parameters and momentum. Rank 0 writes it after each epoch to a new file of its own beside FILE
// (FILE.XXXXXX, never following a link), flushes it to the disk and renames it over FILE, so a
// rank killed while writing, a crash or a full disk leaves the last good checkpoint; at start,
// rank 0 reads it and the train loop broadcasts it to every rank.
#pragma once

#include <optional>
#include <string>

#include "mlp.h"

namespace fmnist {

// Throws std::runtime_error naming the step that failed when the file cannot be written (FILE
// is then as it was).
void save_checkpoint(const std::string& path, int epochs_done, Mlp& model);

// The epochs done, with the model's parameters and momentum filled in; nullopt when there is no
// file. Throws std::runtime_error for a file that is not a checkpoint of this model.
std::optional<int> load_checkpoint(const std::string& path, Mlp& model);

}  // namespace fmnist
