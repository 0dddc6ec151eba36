// The sealed link of agents that connect back (agent/sealed_link.h): the exchange with both
// sides in this process over a socketpair, a wrong secret refused by whichever side checks it
// first, and records that were changed, replayed, reordered or cut refused with a message that
// says which.
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "agent/sealed_link.h"
#include "common/fd_io.h"
#include "common/unique_fd.h"

using Catch::Matchers::ContainsSubstring;
using hvd::agent::AgentHandshake;
using hvd::agent::LauncherHandshake;
using hvd::agent::parse_seal_hello;
using hvd::agent::RecordOpener;
using hvd::agent::RecordSealer;
using hvd::agent::SealError;
using hvd::agent::SealKeys;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Pair {
  SealKeys agent;
  SealKeys launcher;
};

// Both sides of the exchange in memory; the agent's secret may differ from the launcher's.
Pair handshake(const std::string& agent_secret = kSecret) {
  AgentHandshake a(agent_secret, "n2");
  LauncherHandshake l(kSecret, a.hello());
  const std::string proof = a.on_reply(l.reply());
  REQUIRE(l.check_proof(proof));
  return {a.keys(), l.keys()};
}

std::string open_all(RecordOpener& opener, const std::string& bytes) {
  std::string out;
  opener.open(bytes, out);
  return out;
}

// The records of a sealed stream, split at their headers.
std::vector<std::string> split_records(const std::string& stream) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < stream.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(stream.data() + at);
    const std::size_t body =
        (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    out.push_back(stream.substr(at, 4 + body));
    at += 4 + body;
  }
  return out;
}

template <typename Fn>
std::string seal_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const SealError& e) {
    return e.what();
  }
  FAIL("no SealError");
  return "";
}

}  // namespace

TEST_CASE("sealed link: both sides derive matching keys, one per direction", "[sealed]") {
  CHECK_NOTHROW(hvd::agent::warm_up_sealed_link());  // what hvdrun runs while srun starts
  const Pair p = handshake();
  CHECK(p.agent.send == p.launcher.receive);
  CHECK(p.agent.receive == p.launcher.send);
  CHECK(p.agent.send != p.agent.receive);
  // A fresh key pair per connection: the same secret gives other keys next time.
  const Pair q = handshake();
  CHECK(q.agent.send != p.agent.send);
}

TEST_CASE("sealed link: the exchange and records over a socketpair, both sides at once",
          "[sealed]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  hvd::UniqueFd agent_fd(sv[0]), launcher_fd(sv[1]);
  std::string agent_got;
  std::string agent_error;
  std::thread agent([&] {
    try {
      AgentHandshake a(kSecret, "n3");
      hvd::write_all(agent_fd.get(), a.hello());
      std::string reply(hvd::agent::kSealReplyBytes, '\0');
      std::size_t have = 0;
      while (have < reply.size()) {
        const long n = hvd::read_some(agent_fd.get(), reply.data() + have, reply.size() - have);
        if (n <= 0) throw SealError("closed");
        have += static_cast<std::size_t>(n);
      }
      hvd::write_all(agent_fd.get(), a.on_reply(reply));
      RecordSealer sealer(a.keys().send);
      hvd::write_all(agent_fd.get(), sealer.seal("hello from n3"));
      RecordOpener opener(a.keys().receive, "the launcher");
      char buf[4096];
      while (agent_got.size() < 5) {
        const long n = hvd::read_some(agent_fd.get(), buf, sizeof buf);
        if (n <= 0) break;
        opener.open(std::string_view(buf, static_cast<std::size_t>(n)), agent_got);
      }
    } catch (const std::exception& e) {
      agent_error = e.what();  // asserted on the main thread (Catch2 is not thread-safe)
    }
  });
  std::string in;
  char buf[4096];
  std::optional<hvd::agent::SealHello> hello;
  while (!hello) {
    const long n = hvd::read_some(launcher_fd.get(), buf, sizeof buf);
    REQUIRE(n > 0);
    in.append(buf, static_cast<std::size_t>(n));
    hello = parse_seal_hello(in);
  }
  CHECK(hello->node == "n3");
  LauncherHandshake l(kSecret, in.substr(0, hello->size));
  in.erase(0, hello->size);
  hvd::write_all(launcher_fd.get(), l.reply());
  while (in.size() < hvd::agent::kSealKeyBytes) {
    const long n = hvd::read_some(launcher_fd.get(), buf, sizeof buf);
    REQUIRE(n > 0);
    in.append(buf, static_cast<std::size_t>(n));
  }
  REQUIRE(l.check_proof(in.substr(0, hvd::agent::kSealKeyBytes)));
  in.erase(0, hvd::agent::kSealKeyBytes);
  RecordOpener opener(l.keys().receive, "the agent on n3");
  std::string got;
  opener.open(in, got);
  while (got.size() < 13) {
    const long n = hvd::read_some(launcher_fd.get(), buf, sizeof buf);
    REQUIRE(n > 0);
    opener.open(std::string_view(buf, static_cast<std::size_t>(n)), got);
  }
  CHECK(got == "hello from n3");
  RecordSealer sealer(l.keys().send);
  hvd::write_all(launcher_fd.get(), sealer.seal("spec!"));
  agent.join();
  CHECK(agent_error.empty());
  CHECK(agent_got == "spec!");
}

TEST_CASE("sealed link: a wrong secret is refused before anything of the job", "[sealed]") {
  SECTION("the agent checks the launcher's proof first") {
    AgentHandshake a("not the secret", "n1");
    LauncherHandshake l(kSecret, a.hello());
    CHECK_THAT(seal_error_of([&] { a.on_reply(l.reply()); }),
               ContainsSubstring("did not prove the launch's secret"));
  }
  SECTION("a stranger with the launcher's reply in hand cannot prove itself") {
    AgentHandshake a(kSecret, "n1");
    LauncherHandshake l(kSecret, a.hello());
    CHECK_FALSE(l.check_proof(std::string(32, 'x')));
    // The launcher's own proof reflected back: the labels differ.
    CHECK_FALSE(l.check_proof(l.reply().substr(32)));
  }
  SECTION("a proof for another exchange does not fit this one") {
    AgentHandshake a1(kSecret, "n1");
    LauncherHandshake l1(kSecret, a1.hello());
    const std::string proof1 = a1.on_reply(l1.reply());
    AgentHandshake a2(kSecret, "n1");
    LauncherHandshake l2(kSecret, a2.hello());
    CHECK_FALSE(l2.check_proof(proof1));
    CHECK(l1.check_proof(proof1));
  }
  SECTION("a reply changed on the way") {
    AgentHandshake a(kSecret, "n1");
    LauncherHandshake l(kSecret, a.hello());
    std::string reply = l.reply();
    reply[3] = static_cast<char>(reply[3] ^ 1);  // the launcher's public key
    CHECK_THROWS_AS(a.on_reply(reply), SealError);
  }
  SECTION("a hello that names another node than the agent's") {
    AgentHandshake a(kSecret, "n1");
    std::string hello = a.hello();
    hello[9] = 'X';  // "n1" -> "X1": the proofs cover the node's name
    LauncherHandshake l(kSecret, hello);
    CHECK_THROWS_AS(a.on_reply(l.reply()), SealError);
  }
}

TEST_CASE("sealed link: hellos are parsed only when whole, and only ours", "[sealed]") {
  AgentHandshake a(kSecret, "node-7");
  const std::string hello = a.hello();
  for (std::size_t n = 0; n < hello.size(); ++n) {
    CHECK_FALSE(parse_seal_hello(hello.substr(0, n)).has_value());
  }
  const auto h = parse_seal_hello(hello + "more");
  REQUIRE(h.has_value());
  CHECK(h->node == "node-7");
  CHECK(h->size == hello.size());
  CHECK_THROWS_AS(parse_seal_hello("HVDAGENT1 token n1\n"), SealError);  // the old clear preamble
  CHECK_THROWS_AS(parse_seal_hello(std::string("HVDSEAL1\0", 9)), SealError);
  CHECK_THROWS_AS(AgentHandshake(kSecret, ""), SealError);
  CHECK_THROWS_AS(AgentHandshake(kSecret, std::string(256, 'n')), SealError);
}

TEST_CASE("sealed link: an agent of another hvdrun version is told from a stranger", "[sealed]") {
  using hvd::agent::other_agent_version;
  // Before the link was sealed, an agent's first line was its token in clear.
  const auto older = other_agent_version("HVDAGENT1 token n1\n");
  REQUIRE(older.has_value());
  CHECK_THAT(*older, ContainsSubstring("an older hvdrun"));
  const auto newer = other_agent_version("HVDSEAL2\x02n1");
  REQUIRE(newer.has_value());
  CHECK_THAT(*newer, ContainsSubstring("sealed link version 2, this hvdrun version 1"));
  // This version's hello, in part or whole, is not another version; nor is a stranger's text,
  // or too few bytes to tell.
  AgentHandshake a(kSecret, "n1");
  CHECK_FALSE(other_agent_version(a.hello()).has_value());
  CHECK_FALSE(other_agent_version("HVDSEAL1").has_value());
  CHECK_FALSE(other_agent_version("HVDSEAL").has_value());
  CHECK_FALSE(other_agent_version("HVDSEALX....").has_value());
  CHECK_FALSE(other_agent_version("GET / HTTP/1.1\r\n").has_value());
  CHECK_FALSE(other_agent_version("").has_value());
}

TEST_CASE("sealed link: records open in order, in any chunking, and hide their bytes", "[sealed]") {
  const Pair p = handshake();
  RecordSealer sealer(p.agent.send);
  std::string stream;
  const std::vector<std::string> messages{"HVD_RENDEZVOUS_TOKEN=secret-value", "x",
                                          std::string(3 * hvd::agent::kMaxRecord + 5, 'z')};
  for (const std::string& m : messages) sealer.seal(m, stream);
  CHECK(sealer.records() == 2 + 4);  // the long one in kMaxRecord pieces
  CHECK(stream.find("secret-value") == std::string::npos);
  std::string expected;
  for (const std::string& m : messages) expected += m;
  for (const std::size_t chunk :
       {std::size_t{1}, std::size_t{7}, std::size_t{65536}, stream.size()}) {
    RecordOpener opener(p.launcher.receive, "the agent");
    std::string got;
    for (std::size_t at = 0; at < stream.size(); at += chunk) {
      opener.open(std::string_view(stream).substr(at, chunk), got);
    }
    CHECK(got == expected);
    CHECK(opener.pending() == 0);
    CHECK(opener.records() == 6);
  }
}

TEST_CASE("sealed link: the nonce counter runs per direction, from zero", "[sealed]") {
  const Pair p = handshake();
  // The same bytes twice give different records (the counter is in the nonce).
  RecordSealer sealer(p.launcher.send);
  const std::string r1 = sealer.seal("same");
  const std::string r2 = sealer.seal("same");
  CHECK(r1 != r2);
  CHECK(sealer.records() == 2);
  // A second sealer with the same key starts over at zero: its first record is r1 again, which
  // an opener that has taken r1 refuses as a replay.
  RecordSealer again(p.launcher.send);
  CHECK(again.seal("same") == r1);
  RecordOpener opener(p.agent.receive, "the launcher");
  CHECK(open_all(opener, r1) == "same");
  CHECK_THAT(seal_error_of([&] { open_all(opener, r1); }),
             ContainsSubstring("record 1 again: a replay"));
  // The other direction's key does not open it.
  RecordOpener wrong_way(p.agent.send, "the launcher");
  CHECK_THAT(seal_error_of([&] { open_all(wrong_way, r1); }),
             ContainsSubstring("changed on the way"));
}

TEST_CASE("sealed link: a changed, replayed, reordered or dropped record is refused and named",
          "[sealed]") {
  const Pair p = handshake();
  RecordSealer sealer(p.launcher.send);
  std::string stream;
  for (int i = 1; i <= 4; ++i) sealer.seal("frame " + std::to_string(i), stream);
  const std::vector<std::string> r = split_records(stream);
  REQUIRE(r.size() == 4);
  RecordOpener opener(p.agent.receive, "the launcher");

  SECTION("a changed byte") {
    std::string bad = r[1];
    bad[6] = static_cast<char>(bad[6] ^ 0x20);
    CHECK(open_all(opener, r[0]) == "frame 1");
    CHECK_THAT(seal_error_of([&] { open_all(opener, bad); }),
               ContainsSubstring("refused record 2 from the launcher: it was changed on the way"));
    // Refused for good: not even the right record is taken after.
    CHECK_THROWS_AS(open_all(opener, r[1]), SealError);
  }
  SECTION("a changed tag or length") {
    std::string bad = r[0];
    bad.back() = static_cast<char>(bad.back() ^ 1);
    CHECK_THAT(seal_error_of([&] { open_all(opener, bad); }),
               ContainsSubstring("changed on the way"));
  }
  SECTION("a length out of range") {
    CHECK_THAT(seal_error_of([&] { open_all(opener, std::string("\x7f\0\0\0", 4)); }),
               ContainsSubstring("a length of"));
    RecordOpener o2(p.agent.receive, "the launcher");
    CHECK_THAT(seal_error_of([&] { open_all(o2, std::string("\0\0\0\x05", 4)); }),
               ContainsSubstring("a length of 5 bytes"));
  }
  SECTION("a replay") {
    CHECK(open_all(opener, r[0] + r[1]) == "frame 1frame 2");
    CHECK_THAT(
        seal_error_of([&] { open_all(opener, r[0]); }),
        ContainsSubstring("refused record 3 from the launcher: it is record 1 again: a replay"));
  }
  SECTION("two records swapped") {
    CHECK(open_all(opener, r[0]) == "frame 1");
    CHECK_THAT(
        seal_error_of([&] { open_all(opener, r[2] + r[1]); }),
        ContainsSubstring("refused record 2 from the launcher: it is record 3, which was to come "
                          "later: reordered"));
  }
  SECTION("a record dropped") {
    CHECK_THAT(seal_error_of([&] { open_all(opener, r[1]); }),
               ContainsSubstring("refused record 1 from the launcher: it is record 2"));
  }
  SECTION("cut mid-record: held back, nothing made up") {
    CHECK(open_all(opener, r[0] + r[1].substr(0, 9)).empty() == false);
    CHECK(opener.pending() == 9);
  }
}
