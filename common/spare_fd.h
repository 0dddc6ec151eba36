// Accepting while the process is out of descriptors. accept4() then fails with EMFILE or ENFILE
// and leaves the connection pending: the listener stays readable, and a poll() loop around it
// spins at full speed accepting nothing (the srun listener: 3.79 CPU-s in 4 s at a hard limit of
// 1030 descriptors). The classic remedy, one implementation for every listener of hvdrun and
// libhvd (the agents' probe listener, the srun agents' listener, libhvd's control plane): a spare
// descriptor held in reserve, given up to accept the pending connection and close it at once,
// then taken again.
//
// Threading: one owner thread per object.
#pragma once

#include <cerrno>

#include "common/unique_fd.h"

namespace hvd {

class SpareDescriptor {
 public:
  SpareDescriptor();  // holds /dev/null open

  // Whether accept4()'s errno says the descriptor table is full.
  static bool out_of_descriptors(int error) { return error == EMFILE || error == ENFILE; }

  // For a failed accept4 with out_of_descriptors() when nothing of the caller's own can be
  // closed: the connection waiting on `listener` is accepted in the spare's place and closed.
  // False when none was waiting. The spare is taken again either way (if it can be).
  bool drop_pending(int listener);

 private:
  UniqueFd spare_;
};

}  // namespace hvd
