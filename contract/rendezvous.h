// The rendezvous protocol between hvdrun's server (launcher/native/rendezvous_server.h) and the
// ranks' client (allreduce/backends/http_store.h; the benchmarks' raw Gloo store too): HTTP/1.1
// with PUT/GET/DELETE /<scope>/<key>, 404 for a key not there yet, every request carrying the job's
// token as a bearer token and the rank in X-Hvd-Rank. Both sides read these definitions, so the
// paths, headers and limits are written once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hvd::contract::rendezvous {

inline constexpr std::string_view kAuthorizationHeader = "Authorization";
inline constexpr std::string_view kRankHeader = "X-Hvd-Rank";  // the rank, in decimal
inline constexpr std::size_t kMaxName = 256;                   // scope and key each
inline constexpr std::size_t kMaxValue = 16u << 20;            // NCCL ids, Gloo addresses: tiny
// The route the server serves (a regular expression with the scope and key as its groups).
inline constexpr std::string_view kKeyRoute = R"(/([^/]+)/([^/]+))";

// "Bearer <token>": the Authorization header's value.
std::string bearer(std::string_view token);

// 1 to kMaxName characters of [A-Za-z0-9._-]: what the server accepts as a scope or key.
bool valid_name(std::string_view name);

// A store key as a path segment: itself when valid_name(), else "x-" and its bytes in hex (Gloo's
// keys can hold any byte).
std::string encode_key(std::string_view key);

// "/<scope>/<encoded key>".
std::string key_path(std::string_view scope, std::string_view key);

// Rounds of one scope: libhvd meets the other ranks again after shutdown() and init() in one
// process (Horovod's test suite does it after every test) under "<scope>.r<N>" for round N >= 1;
// round 0 is the bare scope. A rank stores a key of round N only after round N-1's rendezvous
// is complete, which needs every rank to be done with round N-2; so once round N is seen, the
// server drops rounds N-2 and earlier of that scope (their keys would otherwise pile up, a few
// per rank per round, until the job ends).
struct ScopeRound {
  std::string base;  // the scope without ".r<N>"
  long round = 0;
};
// "job.global.r12" -> {"job.global", 12}; "job.global" (or any other name) -> {itself, 0}.
ScopeRound scope_round(std::string_view scope);

// HVD_RENDEZVOUS_ADDR: "host:port", "[v6]:port". join_address writes it; split_address reads it
// back (the host without brackets), or nullopt when it is not that shape.
std::string join_address(std::string_view host, int port);
std::optional<std::pair<std::string, int>> split_address(std::string_view address);

}  // namespace hvd::contract::rendezvous
