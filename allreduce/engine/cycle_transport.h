// The collectives of the negotiation cycles (cycle_engine.h), on a communicator of their own:
// a bitwise AND of a few words from every rank (the response cache's agreement: its size does not
// grow with the number of ranks), and every rank's contribution to every rank (an allgather).
//
// start_and() and start() do not block: a rank may start a round that the others have not reached
// yet, and polls it with anded() or gathered() while it does other things. Once started, a round
// must be finished: collectives cannot be withdrawn. Calls come from one thread at a time (the
// engine's driver lock), in the same order on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hvd/hvd.h"  // hvd_status

namespace hvd::runtime {

class CycleTransport {
 public:
  virtual ~CycleTransport() = default;
  // Starts this rank's part of an allgather round with `contribution`, of which `data_bytes` are
  // a tensor's data (an eager allreduce, cycle_engine.h): a transport may size its rounds for it.
  virtual void start(std::string contribution, std::size_t data_bytes) = 0;
  // Every rank's contribution, by rank, once they all arrived here; nullptr until then. The
  // transport keeps them (and their buffers, for the next rounds) until the next start().
  virtual const std::vector<std::string>* gathered() = 0;
  // Starts this rank's part of an AND round; every rank brings as many words.
  virtual void start_and(std::vector<std::uint64_t> words) = 0;
  // The bitwise AND of every rank's words, once they all arrived here; nullopt until then.
  virtual std::optional<std::vector<std::uint64_t>> anded() = 0;
  // Rank 0, when the job failed: tells every rank why, on connections of the transport's own if
  // it has them, ahead of what rank 0's exit would show there (connections closing), so the
  // others report the cause rather than rank 0's departure. Best effort; nothing by default.
  virtual void abort(const std::string& /*why*/, hvd_status /*status*/) {}
};

}  // namespace hvd::runtime
