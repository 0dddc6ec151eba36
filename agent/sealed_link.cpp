#include "agent/sealed_link.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace hvd::agent {
namespace {

constexpr std::string_view kTranscriptLabel = "hvdrun sealed link 1";
constexpr std::string_view kAuthSalt = "hvdrun sealed link auth";
constexpr std::string_view kLauncherProves = "launcher proves";
constexpr std::string_view kAgentProves = "agent proves";
constexpr std::string_view kToLauncher = "agent to launcher";
constexpr std::string_view kToAgent = "launcher to agent";
constexpr std::size_t kNonceBytes = 12;
constexpr uint64_t kDiagnoseWindow = 64;  // records before and after tried when one fails

const unsigned char* u8(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// libcrypto failing where it cannot (out of memory, a broken build): not the peer's doing.
[[noreturn]] void crypto_failed(const char* what) {
  throw Error(fmt::format("libcrypto: {} failed", what), "", ErrorKind::kInternal);
}

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string hkdf(std::string_view key, std::string_view salt, std::string_view info,
                 std::size_t size) {
  PkeyCtx c(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::string out(size, '\0');
  std::size_t len = size;
  if (!c || EVP_PKEY_derive_init(c.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(c.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(c.get(), u8(salt), static_cast<int>(salt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(c.get(), u8(key), static_cast<int>(key.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(c.get(), u8(info), static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(c.get(), reinterpret_cast<unsigned char*>(out.data()), &len) <= 0 ||
      len != size) {
    crypto_failed("HKDF");
  }
  return out;
}

SealKey to_key(const std::string& bytes) {
  SealKey k{};
  std::copy_n(bytes.begin(), k.size(), k.begin());
  return k;
}

SealKey auth_key(std::string_view secret) {
  return to_key(hkdf(secret, kAuthSalt, "proofs", kSealKeyBytes));
}

std::string sha256(std::string_view data) {
  std::string out(32, '\0');
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()), &len,
                 EVP_sha256(), nullptr) <= 0) {
    crypto_failed("SHA-256");
  }
  return out;
}

std::string proof(const SealKey& auth, std::string_view label, std::string_view transcript) {
  std::string data(label);
  data += transcript;
  std::string out(32, '\0');
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), auth.data(), static_cast<int>(auth.size()), u8(data), data.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr) {
    crypto_failed("HMAC-SHA256");
  }
  return out;
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// A fresh X25519 key pair. Its private key is 32 bytes from the kernel's generator (getrandom,
// which waits until that is seeded), as RFC 7748 has it; libcrypto's own keygen draws them from
// its DRBG, whose set-up in each process (about 1 ms of CPU at an srun agent's start, on the
// launch's critical path) the link does not otherwise need.
Pkey new_key_pair() {
  unsigned char secret[kSealKeyBytes];
  std::size_t have = 0;
  while (have < sizeof secret) {
    const ssize_t n = ::getrandom(secret + have, sizeof secret - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) crypto_failed("X25519 key generation (getrandom)");
    have += static_cast<std::size_t>(n);
  }
  Pkey k(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, secret, sizeof secret));
  OPENSSL_cleanse(secret, sizeof secret);
  if (!k) crypto_failed("X25519 key generation");
  return k;
}

// The agent's first use of libcrypto. Left to itself, libcrypto's first use in a process reads
// the system's openssl.cnf and loads its error strings: several ms of CPU at an srun agent's
// start, on the launch's critical path (bench/README.md). The link needs neither (its
// algorithms are the default provider's; its errors are ours). In hvdrun, where libssh
// initialised libcrypto at load time, this changes nothing.
Pkey agent_key_pair() {
  [[maybe_unused]] static const bool lean = OPENSSL_init_crypto(
      OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS, nullptr);
  return new_key_pair();
}

std::string public_key_of(EVP_PKEY* k) {
  std::string out(kSealKeyBytes, '\0');
  std::size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(k, reinterpret_cast<unsigned char*>(out.data()), &len) <= 0 ||
      len != kSealKeyBytes) {
    crypto_failed("X25519 public key");
  }
  return out;
}

// The X25519 shared secret with the peer's public key. A key that gives the all-zero secret (a
// point of small order, which an attacker may send) is refused by libcrypto: a SealError.
std::string shared_secret(EVP_PKEY* ours, std::string_view peer_public, const std::string& peer) {
  Pkey theirs(
      EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, u8(peer_public), peer_public.size()));
  PkeyCtx c(EVP_PKEY_CTX_new(ours, nullptr));
  std::string out(32, '\0');
  std::size_t len = out.size();
  if (!theirs || !c || EVP_PKEY_derive_init(c.get()) <= 0 ||
      EVP_PKEY_derive_set_peer(c.get(), theirs.get()) <= 0 ||
      EVP_PKEY_derive(c.get(), reinterpret_cast<unsigned char*>(out.data()), &len) <= 0 ||
      len != out.size()) {
    throw SealError(fmt::format("{} sent an X25519 public key that gives no shared secret", peer));
  }
  return out;
}

SealKeys session_keys(std::string_view shared, const SealKey& auth, std::string_view transcript,
                      bool agent) {
  std::string ikm(shared);
  ikm.append(reinterpret_cast<const char*>(auth.data()), auth.size());
  const SealKey to_launcher = to_key(hkdf(ikm, transcript, kToLauncher, kSealKeyBytes));
  const SealKey to_agent = to_key(hkdf(ikm, transcript, kToAgent, kSealKeyBytes));
  return agent ? SealKeys{to_launcher, to_agent} : SealKeys{to_agent, to_launcher};
}

std::string transcript_of(std::string_view hello, std::string_view launcher_public) {
  std::string t(kTranscriptLabel);
  t += hello;
  t += launcher_public;
  return sha256(t);
}

std::array<unsigned char, kNonceBytes> nonce(uint64_t counter) {
  std::array<unsigned char, kNonceBytes> n{};
  for (int i = 0; i < 8; ++i)
    n[kNonceBytes - 1 - static_cast<std::size_t>(i)] =
        static_cast<unsigned char>(counter >> (8 * i));
  return n;
}

uint32_t read_u32(std::string_view b) {
  return (uint32_t{static_cast<unsigned char>(b[0])} << 24) |
         (uint32_t{static_cast<unsigned char>(b[1])} << 16) |
         (uint32_t{static_cast<unsigned char>(b[2])} << 8) |
         uint32_t{static_cast<unsigned char>(b[3])};
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

CipherCtx gcm_context(const SealKey& key, bool encrypt) {
  CipherCtx c(EVP_CIPHER_CTX_new());
  if (!c || EVP_CipherInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, key.data(), nullptr,
                              encrypt ? 1 : 0) <= 0) {
    crypto_failed("AES-256-GCM set-up");
  }
  return c;
}

}  // namespace

// --- records ---------------------------------------------------------------------------------

struct RecordSealer::Cipher {
  CipherCtx ctx;
};

RecordSealer::RecordSealer(const SealKey& key)
    : cipher_(std::make_unique<Cipher>(Cipher{gcm_context(key, true)})) {}
RecordSealer::~RecordSealer() = default;
RecordSealer::RecordSealer(RecordSealer&&) noexcept = default;
RecordSealer& RecordSealer::operator=(RecordSealer&&) noexcept = default;

void RecordSealer::seal(std::string_view plain, std::string& out) {
  EVP_CIPHER_CTX* c = cipher_->ctx.get();
  while (!plain.empty()) {
    const std::string_view part = plain.substr(0, kMaxRecord);
    plain.remove_prefix(part.size());
    const uint32_t body = static_cast<uint32_t>(part.size() + kSealTagBytes);
    const std::size_t at = out.size();
    out.resize(at + kSealHeaderBytes + body);
    auto* p = reinterpret_cast<unsigned char*>(out.data()) + at;
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(body >> (24 - 8 * i));
    const auto iv = nonce(count_++);
    int len = 0;
    int last = 0;
    if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) <= 0 ||
        EVP_EncryptUpdate(c, nullptr, &len, p, kSealHeaderBytes) <= 0 ||
        EVP_EncryptUpdate(c, p + kSealHeaderBytes, &len, u8(part), static_cast<int>(part.size())) <=
            0 ||
        EVP_EncryptFinal_ex(c, p + kSealHeaderBytes + len, &last) <= 0 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kSealTagBytes,
                            p + kSealHeaderBytes + part.size()) <= 0) {
      crypto_failed("AES-256-GCM seal");
    }
  }
}

struct RecordOpener::Cipher {
  CipherCtx ctx;
};

RecordOpener::RecordOpener(const SealKey& key, std::string peer)
    : cipher_(std::make_unique<Cipher>(Cipher{gcm_context(key, false)})), peer_(std::move(peer)) {}
RecordOpener::~RecordOpener() = default;
RecordOpener::RecordOpener(RecordOpener&&) noexcept = default;
RecordOpener& RecordOpener::operator=(RecordOpener&&) noexcept = default;

bool RecordOpener::open_one(uint64_t counter, std::string_view record, std::string* out) {
  EVP_CIPHER_CTX* c = cipher_->ctx.get();
  const std::size_t plain = record.size() - kSealHeaderBytes - kSealTagBytes;
  std::string scratch;
  std::string& dest = out != nullptr ? *out : scratch;
  const std::size_t at = dest.size();
  dest.resize(at + plain);
  const auto iv = nonce(counter);
  const auto* r = u8(record);
  int len = 0;
  int last = 0;
  std::array<unsigned char, kSealTagBytes> tag{};
  std::copy_n(r + kSealHeaderBytes + plain, kSealTagBytes, tag.begin());
  const bool ok =
      EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) > 0 &&
      EVP_DecryptUpdate(c, nullptr, &len, r, kSealHeaderBytes) > 0 &&
      EVP_DecryptUpdate(c, reinterpret_cast<unsigned char*>(dest.data()) + at, &len,
                        r + kSealHeaderBytes, static_cast<int>(plain)) > 0 &&
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag.data()) > 0 &&
      EVP_DecryptFinal_ex(c, reinterpret_cast<unsigned char*>(dest.data()) + at + len, &last) > 0;
  if (!ok) dest.resize(at);
  return ok;
}

void RecordOpener::refuse(std::string_view record) {
  broken_ = true;
  const uint64_t n = count_;  // the counter this record should have had
  std::string what;
  for (uint64_t back = 1; what.empty() && back <= std::min(n, kDiagnoseWindow); ++back) {
    if (open_one(n - back, record, nullptr)) {
      what = fmt::format("it is record {} again: a replay", n - back + 1);
    }
  }
  for (uint64_t ahead = 1; what.empty() && ahead <= kDiagnoseWindow; ++ahead) {
    if (open_one(n + ahead, record, nullptr)) {
      what = fmt::format("it is record {}, which was to come later: reordered, or records dropped",
                         n + ahead + 1);
    }
  }
  if (what.empty()) what = "it was changed on the way, or sealed with another key";
  throw SealError(
      fmt::format("sealed link: refused record {} from {}: {}", n + 1, peer_, what),
      "someone between this machine and the other side altered the connection: check the "
      "network path (a proxy or relay) between hvdrun and the Slurm nodes");
}

uint32_t RecordOpener::body_size(std::string_view header) {
  const uint32_t body = read_u32(header);
  if (body <= kSealTagBytes || body > kMaxRecord + kSealTagBytes) {
    broken_ = true;
    throw SealError(
        fmt::format("sealed link: refused record {} from {}: a length of {} bytes, where a sealed "
                    "record holds {} to {}",
                    count_ + 1, peer_, body, kSealTagBytes + 1, kMaxRecord + kSealTagBytes));
  }
  return body;
}

void RecordOpener::open(std::string_view bytes, std::string& out) {
  if (broken_) {
    throw SealError(fmt::format("sealed link: {} is refused after an earlier bad record", peer_));
  }
  // A record held back is completed first; whole records in `bytes` are opened where they lie
  // (rank output is most of what crosses: one copy fewer), and only a partial one is kept.
  if (!buffer_.empty()) {
    const std::size_t header =
        std::min(bytes.size(), kSealHeaderBytes - std::min(buffer_.size(), kSealHeaderBytes));
    buffer_.append(bytes.substr(0, header));
    bytes.remove_prefix(header);
    if (buffer_.size() < kSealHeaderBytes) return;
    const std::size_t size = kSealHeaderBytes + body_size(buffer_);
    const std::size_t rest = std::min(bytes.size(), size - buffer_.size());
    buffer_.append(bytes.substr(0, rest));
    bytes.remove_prefix(rest);
    if (buffer_.size() < size) return;
    if (!open_one(count_, buffer_, &out)) refuse(buffer_);
    ++count_;
    buffer_.clear();
  }
  while (bytes.size() >= kSealHeaderBytes) {
    const std::size_t size = kSealHeaderBytes + body_size(bytes);
    if (bytes.size() < size) break;
    const std::string_view record = bytes.substr(0, size);
    if (!open_one(count_, record, &out)) refuse(record);
    ++count_;
    bytes.remove_prefix(size);
  }
  buffer_.assign(bytes);
}

// --- the exchange ----------------------------------------------------------------------------

std::optional<SealHello> parse_seal_hello(std::string_view bytes) {
  const std::size_t have = std::min(bytes.size(), kSealMagic.size());
  if (bytes.substr(0, have) != kSealMagic.substr(0, have)) {
    throw SealError("not the hello of an hvdrun agent (no HVDSEAL1 magic)");
  }
  if (bytes.size() < kSealMagic.size() + 1) return std::nullopt;
  const std::size_t node = static_cast<unsigned char>(bytes[kSealMagic.size()]);
  if (node == 0) throw SealError("an agent hello without a node name");
  const std::size_t size = kSealMagic.size() + 1 + node + kSealKeyBytes;
  if (bytes.size() < size) return std::nullopt;
  return SealHello{std::string(bytes.substr(kSealMagic.size() + 1, node)),
                   std::string(bytes.substr(size - kSealKeyBytes, kSealKeyBytes)), size};
}

std::optional<std::string> other_agent_version(std::string_view first_bytes) {
  if (first_bytes.starts_with("HVDAGENT")) {
    return "an agent of an older hvdrun, from before the srun link was sealed (its first bytes: "
           "HVDAGENT)";
  }
  const std::string_view family = kSealMagic.substr(0, kSealMagic.size() - 1);  // "HVDSEAL"
  if (first_bytes.size() > family.size() && first_bytes.starts_with(family) &&
      first_bytes.substr(0, kSealMagic.size()) != kSealMagic) {
    const char v = first_bytes[family.size()];
    if (v >= '0' && v <= '9') {
      return fmt::format(
          "an agent of another hvdrun version (it speaks sealed link version {}, "
          "this hvdrun version {})",
          v, kSealMagic.back());
    }
  }
  return std::nullopt;
}

struct AgentHandshake::KeyPair {
  Pkey key;
};

AgentHandshake::AgentHandshake(std::string_view secret, std::string_view node)
    : pair_(std::make_unique<KeyPair>(KeyPair{agent_key_pair()})), auth_(auth_key(secret)) {
  if (node.empty() || node.size() > 255) {
    throw SealError(fmt::format("a node name of {} bytes cannot be sent (1 to 255)", node.size()));
  }
  hello_ = std::string(kSealMagic);
  hello_ += static_cast<char>(node.size());
  hello_ += node;
  hello_ += public_key_of(pair_->key.get());
}

AgentHandshake::~AgentHandshake() = default;

std::string AgentHandshake::on_reply(std::string_view reply) {
  if (reply.size() != kSealReplyBytes) {
    throw SealError(
        fmt::format("the launcher's reply has {} bytes, not {}", reply.size(), kSealReplyBytes));
  }
  const std::string_view launcher_public = reply.substr(0, kSealKeyBytes);
  const std::string t = transcript_of(hello_, launcher_public);
  if (!same_bytes(reply.substr(kSealKeyBytes), proof(auth_, kLauncherProves, t))) {
    throw SealError(
        "the launcher did not prove the launch's secret (HVD_AGENT_TOKEN): not the hvdrun that "
        "started this step, or someone in between",
        "nothing of the job was sent; check the network path between this node and hvdrun");
  }
  const std::string shared = shared_secret(pair_->key.get(), launcher_public, "the launcher");
  keys_ = session_keys(shared, auth_, t, true);
  return proof(auth_, kAgentProves, t);
}

LauncherHandshake::LauncherHandshake(std::string_view secret, std::string_view hello)
    : auth_(auth_key(secret)) {
  const std::optional<SealHello> h = parse_seal_hello(hello);
  if (!h || h->size != hello.size()) throw SealError("an incomplete agent hello");
  const Pkey ours = new_key_pair();
  const std::string launcher_public = public_key_of(ours.get());
  transcript_ = transcript_of(hello, launcher_public);
  const std::string shared = shared_secret(ours.get(), h->public_key, "the agent");
  pending_ = session_keys(shared, auth_, transcript_, false);
  reply_ = launcher_public + proof(auth_, kLauncherProves, transcript_);
}

LauncherHandshake::~LauncherHandshake() = default;
LauncherHandshake::LauncherHandshake(LauncherHandshake&&) noexcept = default;
LauncherHandshake& LauncherHandshake::operator=(LauncherHandshake&&) noexcept = default;

void warm_up_sealed_link() {
  const Pkey agent_key = new_key_pair();
  std::string hello(kSealMagic);
  hello += '\x01';
  hello += 'w';
  hello += public_key_of(agent_key.get());
  const LauncherHandshake launcher("warm-up", hello);
  RecordSealer sealer(SealKey{});
  RecordOpener opener(SealKey{}, "the warm-up");
  std::string out;
  opener.open(sealer.seal("warm-up"), out);
}

bool LauncherHandshake::check_proof(std::string_view agent_proof) {
  if (!same_bytes(agent_proof, proof(auth_, kAgentProves, transcript_))) return false;
  keys_ = pending_;
  return true;
}

}  // namespace hvd::agent
