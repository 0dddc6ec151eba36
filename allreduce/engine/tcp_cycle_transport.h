// The negotiation cycles' collectives over TCP (cycle_transport.h), for backends whose own small
// collectives cost more than a message: under Gloo a 4 KiB allreduce takes 160-190 us on the
// development VM, a round trip to rank 0 a few tens (bench/README.md, "Gloo's event loop and the
// scheduler").
//
// A star around rank 0 on connections of its own (a second ControlPlane, not the one that carries
// doorbells and keepalives, so the background thread never reads a cycle's messages): each rank
// sends its part to rank 0; rank 0, once it has every part, sends every rank the result (all the
// contributions, or the AND of all the words). A round is one message each way, read by whichever
// thread polls the round, so a synchronous call costs one round trip and no thread hand-off.
//
// Nothing blocks but rank 0's sending of a result, to ranks that are all in the round and
// polling it (for at most `send_timeout`: a rank frozen since it sent its part is an
// HVD_ERR_TIMEOUT, not a hang): the other ranks queue their part and send what the socket takes,
// a little more at each poll, so a rank whose part is larger than the socket's buffer never waits
// for rank 0 to join. A connection that closes, or a message that is not the round's, is a
// StatusError (HVD_ERR_PEER_LOST, worded as the control plane words it; HVD_ERR_BACKEND) from
// start() or the poll, which ends the cycles.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "allreduce/engine/control_plane.h"
#include "allreduce/engine/cycle_transport.h"

namespace hvd::runtime {

class TcpCycleTransport final : public CycleTransport {
 public:
  explicit TcpCycleTransport(ControlPlane plane,
                             std::chrono::milliseconds send_timeout = std::chrono::seconds(30));

  void start(std::string contribution, std::size_t data_bytes) override;
  const std::vector<std::string>* gathered() override;
  void start_and(std::vector<std::uint64_t> words) override;
  std::optional<std::vector<std::uint64_t>> anded() override;
  void abort(const std::string& why, hvd_status status) override;

 private:
  // A message's first byte: the round it belongs to, or kFatal (rank 0's abort(): a u32 status,
  // then the text), which a member throws whenever it reads it.
  enum class Round : char { kNone = 0, kGather = 'G', kAnd = 'A', kFatal = 'F' };
  void begin(Round kind, std::string part);
  // One non-blocking turn of the started round; true once its result is here (result_).
  bool poll();
  bool poll_root();
  bool poll_member();
  // Reads what `rank`'s connection has into inbox_[rank]; true if the connection closed or
  // failed (a peer that sent its last message and left: that message still counts).
  bool read_from(int rank);
  std::string take_message(
      int rank);  // the next complete message, or "" (messages are never empty)
  // Throw the StatusError that ends the cycles: `rank`'s connection closed or failed
  // (HVD_ERR_PEER_LOST), or `rank` broke the protocol (HVD_ERR_BACKEND).
  [[noreturn]] static void gone(int rank);
  [[noreturn]] static void lost(int rank, const std::string& why);

  // Rank 0: sends `bytes` to `rank` whole, waiting for its socket at most send_timeout_.
  void send_result(int rank, std::string_view bytes);

  ControlPlane plane_;
  std::chrono::milliseconds send_timeout_;
  int rank_, size_;
  Round round_ = Round::kNone;
  bool complete_ = false;
  std::string outbox_;              // a member's framed part, what the socket did not take yet
  std::vector<std::string> inbox_;  // by rank: bytes read, not yet a complete message
  // By rank: the round's parts (rank 0 collects them here, in an AND round too), then an
  // allgather's result.
  std::vector<std::string> gathered_;
  std::vector<bool> have_;  // rank 0: whose part arrived
  std::vector<std::uint64_t> anded_;
};

}  // namespace hvd::runtime
