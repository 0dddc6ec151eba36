// The collectives of one negotiation cycle (cycle_engine.h): every rank's contribution to rank
// 0, then rank 0's reply to every rank, on a communicator of their own.
//
// start() does not block: a rank may start a cycle that the others have not reached yet, and
// polls it (gathered() on rank 0, replied() on the others) while it does other things. Once
// started, a cycle must be finished: collectives cannot be withdrawn. Calls come from one thread
// at a time (the engine's driver lock), in the same order on every rank.
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
  // Rank 0: true once every rank's contribution arrived; contributions() then has them by rank.
  virtual bool gathered() = 0;
  virtual std::vector<std::string> contributions() = 0;
  // Rank 0: sends the reply (every rank has started the cycle: this does not wait for anyone).
  virtual void reply(const std::string& bytes) = 0;
  // Other ranks: the reply once it arrived, else nullopt.
  virtual std::optional<std::string> replied() = 0;
};

}  // namespace hvd::runtime
