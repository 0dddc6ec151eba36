// The sealed link between hvdrun and an agent that connected back to it over TCP (--launcher
// srun: agent/agent_connect.h, launcher/native/srun_agents.h). Confidentiality and mutual
// authentication with the launch's secret (HVD_AGENT_TOKEN), from OpenSSL's libcrypto.
//
// Why not a key derived from the secret alone: Slurm carries the step's environment, the secret
// in it, to the nodes in launch messages it does not encrypt, so whoever records the cluster
// network has the secret too. Each connection therefore makes a fresh X25519 key pair on both
// sides; the secret only authenticates the exchange. Someone who recorded the launch messages
// and the link still cannot read the link; only one who also sits in the path while it opens
// (and knows the secret) can (docs/security.md).
//
// The exchange, on the connection before anything of the job:
//   agent -> launcher  hello: "HVDSEAL1", node name length (u8, 1..255), node name, the agent's
//                      X25519 public key (32 bytes)
//   launcher -> agent  the launcher's public key (32), its proof (32)
//   agent -> launcher  the agent's proof (32)
// Transcript T = SHA-256("hvdrun sealed link 1" | hello | launcher's public key). The proofs are
// HMAC-SHA256(A, label | T), A = HKDF-SHA256(secret, "hvdrun sealed link auth"), with labels
// that differ per side (a proof reflected back is refused). The launcher proves first, and the
// agent sends nothing of the job (not even its hello frame) until it has checked that; the
// launcher sends nothing of the job until it has checked the agent's. The keys: HKDF-SHA256
// over the X25519 shared secret and A, salt T, one key per direction.
//
// Then every byte each way goes in records: u32 big-endian length of what follows (1..kMaxRecord
// + 16), AES-256-GCM ciphertext and its 16-byte tag, the length as additional data, the nonce
// 4 zero bytes and a big-endian 64-bit count of the records sent that way. A record changed,
// replayed, reordered or dropped fails its tag; the opener says which it was where it can tell.
//
// Pure logic over bytes, no I/O: the callers move the bytes (tests drive both sides in one
// process). Not thread-safe; one object per connection side.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace hvd::agent {

inline constexpr std::string_view kSealMagic = "HVDSEAL1";
inline constexpr std::size_t kSealKeyBytes = 32;    // an X25519 public key, a proof, an AES key
inline constexpr std::size_t kSealTagBytes = 16;    // AES-GCM's tag
inline constexpr std::size_t kSealHeaderBytes = 4;  // a record's length
inline constexpr std::size_t kMaxRecord = 1 << 20;  // plaintext per record; more is split
inline constexpr std::size_t kMaxSealHello = kSealMagic.size() + 1 + 255 + kSealKeyBytes;
inline constexpr std::size_t kSealReplyBytes = 2 * kSealKeyBytes;  // launcher: key and proof

// The link refused: a proof that does not match the secret, a record that fails its tag. A host
// lost (exit 74): its link, not its agent or the job, failed.
class SealError : public Error {
 public:
  explicit SealError(const std::string& what, std::string hint = {})
      : Error(what, std::move(hint), ErrorKind::kHostLost) {}
};

using SealKey = std::array<unsigned char, kSealKeyBytes>;

// The keys of one connection side, after the exchange.
struct SealKeys {
  SealKey send{};
  SealKey receive{};
};

// Seals bytes into records, one direction.
class RecordSealer {
 public:
  explicit RecordSealer(const SealKey& key);
  ~RecordSealer();
  RecordSealer(RecordSealer&&) noexcept;
  RecordSealer& operator=(RecordSealer&&) noexcept;
  // Appends `plain` to `out` as one record or more (kMaxRecord each); empty input adds nothing.
  void seal(std::string_view plain, std::string& out);
  std::string seal(std::string_view plain) {
    std::string out;
    seal(plain, out);
    return out;
  }
  uint64_t records() const { return count_; }

 private:
  struct Cipher;
  std::unique_ptr<Cipher> cipher_;
  uint64_t count_ = 0;
};

// Opens records as they arrive, one direction: feed it bytes, take the plaintext.
class RecordOpener {
 public:
  // `peer` names the other side in errors ("the launcher", "the agent on n2").
  RecordOpener(const SealKey& key, std::string peer);
  ~RecordOpener();
  RecordOpener(RecordOpener&&) noexcept;
  RecordOpener& operator=(RecordOpener&&) noexcept;
  // Appends the plaintext of every whole record in `bytes` (with what was held back) to `out`;
  // holds back a partial one. Throws SealError naming the record (its number from 1) and what
  // happened to it: changed, replayed, out of order; a length out of range. After a throw the
  // opener refuses everything.
  void open(std::string_view bytes, std::string& out);
  // Bytes of a partial record held back (nonzero at EOF: the link was cut mid-record).
  std::size_t pending() const { return buffer_.size(); }
  uint64_t records() const { return count_; }

 private:
  bool open_one(uint64_t counter, std::string_view record, std::string* out);
  // The body's size a record's header gives; refuses one out of range.
  uint32_t body_size(std::string_view header);
  [[noreturn]] void refuse(std::string_view record);

  struct Cipher;
  std::unique_ptr<Cipher> cipher_;
  std::string peer_;
  std::string buffer_;
  uint64_t count_ = 0;
  bool broken_ = false;
};

// What an agent's hello says.
struct SealHello {
  std::string node;
  std::string public_key;  // 32 bytes
  std::size_t size = 0;    // of the whole hello
};
// Parses a hello from the start of `bytes`: nullopt when more bytes are needed; throws
// SealError on a wrong magic or a zero-length node name (not an agent of this hvdrun).
std::optional<SealHello> parse_seal_hello(std::string_view bytes);

// What a connection's first bytes say when they are not this version's hello but another
// hvdrun's agent: one from before the link was sealed (its clear preamble, "HVDAGENT"), or one
// that speaks another version of the sealed link ("HVDSEAL" and a digit other than 1). In words,
// for the launcher's error ("an agent of an older hvdrun, ..."); nullopt when they are neither
// (a stranger), or too few bytes to tell.
std::optional<std::string> other_agent_version(std::string_view first_bytes);

// One side of the exchange. Both make a fresh X25519 key pair at construction.
class AgentHandshake {
 public:
  AgentHandshake(std::string_view secret, std::string_view node);
  ~AgentHandshake();
  const std::string& hello() const { return hello_; }
  // The launcher's reply (kSealReplyBytes): checks its proof (SealError if wrong), then gives
  // the agent's proof to send and sets keys().
  std::string on_reply(std::string_view reply);
  const SealKeys& keys() const { return keys_; }

 private:
  struct KeyPair;
  std::unique_ptr<KeyPair> pair_;
  SealKey auth_{};
  std::string hello_;
  SealKeys keys_;
};

class LauncherHandshake {
 public:
  // `hello`: the agent's whole hello, as parse_seal_hello found it.
  LauncherHandshake(std::string_view secret, std::string_view hello);
  ~LauncherHandshake();
  LauncherHandshake(LauncherHandshake&&) noexcept;
  LauncherHandshake& operator=(LauncherHandshake&&) noexcept;
  const std::string& reply() const { return reply_; }
  // The agent's proof: true (and keys() set) when it matches, compared in constant time.
  bool check_proof(std::string_view proof);
  const SealKeys& keys() const { return keys_; }

 private:
  SealKey auth_{};
  std::string transcript_;
  std::string reply_;
  SealKeys pending_;  // keys_ once the agent's proof matched
  SealKeys keys_;
};

// Has libcrypto fetch and set up what the link uses (X25519, HKDF, HMAC, AES-256-GCM): 4-15 ms the
// first time in a process, even where libssh initialised libcrypto. hvdrun calls it while srun
// starts the step, so that the first agent's exchange does not wait for it.
void warm_up_sealed_link();

}  // namespace hvd::agent
