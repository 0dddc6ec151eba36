// The negotiation cycles of a job of one rank (cycle_engine.h): every round is this rank's own
// contribution, so a round finishes as it starts, with no collective, no socket and no thread.
// With it a job of size 1 runs each op on the thread that waits for it, as under MPI, instead of
// handing it to the TCP engine's background thread and back (two wake-ups per op: a synchronous
// 4 KiB allreduce took 33 us on the 2-core development VM; bench/README.md, "Size 1").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "allreduce/engine/cycle_transport.h"

namespace hvd::runtime {

class LocalCycleTransport final : public CycleTransport {
 public:
  void start(std::string contribution, std::size_t /*data_bytes*/) override {
    gathered_.resize(1);
    gathered_[0] = std::move(contribution);
  }
  const std::vector<std::string>* gathered() override { return &gathered_; }
  void start_and(std::vector<std::uint64_t> words) override { anded_ = std::move(words); }
  std::optional<std::vector<std::uint64_t>> anded() override { return anded_; }

 private:
  std::vector<std::string> gathered_;
  std::vector<std::uint64_t> anded_;
};

}  // namespace hvd::runtime
