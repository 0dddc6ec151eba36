// The collective of one negotiation cycle (cycle_engine.h): every rank's contribution to every
// rank (an allgather), on a communicator of its own.
//
// start() does not block: a rank may start a cycle that the others have not reached yet, and
// polls it with gathered() while it does other things. Once started, a cycle must be finished:
// collectives cannot be withdrawn. Calls come from one thread at a time (the engine's driver
// lock), in the same order on every rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hvd::runtime {

class CycleTransport {
 public:
  virtual ~CycleTransport() = default;
  // Starts this rank's part of the next cycle with `contribution`.
  virtual void start(std::string contribution) = 0;
  // Every rank's contribution, by rank, once they all arrived here; nullopt until then.
  virtual std::optional<std::vector<std::string>> gathered() = 0;
};

}  // namespace hvd::runtime
