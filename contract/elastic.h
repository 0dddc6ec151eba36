// Elastic training's world document: what the launcher publishes for each generation of an
// elastic job (docs/design/elastic.md, section 3), and what every rank reads once per generation
// to learn its new rank, size, local and cross coordinates, where rank 0's MASTER_* is and which
// rank holds the state to sync from.
//
// Text, one record a line, so the contract target stays free of a JSON dependency and a human can
// read it out of the rendezvous store:
//
//     hvd-world 1
//     generation 3
//     reason rank 1 on 127.0.0.3 was killed by signal 9
//     master 127.0.0.2 41234
//     sync_root 0
//     size 3
//     worker 0 rank 0 local 0 2 cross 0 2 host 127.0.0.2
//     worker 2 rank 1 local 1 2 cross 0 1 host 127.0.0.2
//     worker 5 rank 2 local 0 1 cross 1 2 host 127.0.0.3
//
// A worker is a process hvdrun started (its id never changes); its rank is its place in this
// generation. decode_world() is strict, like read_topology(): a document it accepts describes a
// world libhvd can build (every rank once, coordinates in range), else ContractError naming the
// line. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contract/topology.h"

namespace hvd::contract {

inline constexpr int kWorldFormat = 1;
// Bounds a decoder holds to (a world document comes from the launcher's store over the network).
inline constexpr std::size_t kMaxWorldBytes = 1 << 20;
inline constexpr int kMaxWorldSize = 65536;
// The descriptor an elastic rank's channel to its agent has in the rank (HVD_ELASTIC_FD).
inline constexpr int kElasticChannelFd = 3;

struct WorldEntry {
  int worker = 0;
  RankTopology topology;
  std::string host;  // the host's name or address as the plan has it (no whitespace)
  bool operator==(const WorldEntry&) const = default;
};

struct WorldDoc {
  int generation = 0;
  std::string reason;  // why this generation began; one line (newlines become spaces)
  std::string master_addr;
  int master_port = 0;
  int sync_root = 0;                // the rank whose state every rank takes in State::sync()
  std::vector<WorldEntry> workers;  // in rank order
  bool operator==(const WorldDoc&) const = default;

  int size() const { return static_cast<int>(workers.size()); }
  // The entry of `worker`, or nullptr when this generation does not have it.
  const WorldEntry* find_worker(int worker) const;
};

// The document's text. Throws ContractError for what decode_world() would refuse (a host with
// whitespace, ranks out of order): the launcher never publishes a world libhvd cannot read.
std::string encode_world(const WorldDoc& doc);
// Throws ContractError naming the line and what is wrong.
WorldDoc decode_world(std::string_view text);

// The rendezvous key of generation `generation`'s document, in scope `<job id>.elastic`.
std::string world_key(int generation);
std::string elastic_scope(std::string_view job_id);
// Gloo's scope for one generation: a failed Gloo context cannot be reused, so each generation
// meets in its own.
std::string generation_scope(std::string_view job_id, int generation);

}  // namespace hvd::contract
