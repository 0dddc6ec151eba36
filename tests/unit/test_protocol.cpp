// The launcher <-> agent wire format (agent/protocol.h, agent/job_spec.h): frames survive any
// chunking, garbage is refused with a message, and argv / environment values are bytes, not text
// (nlohmann-json throws on invalid UTF-8). The byte helpers under it are tested in test_bytes.cpp.
#include <signal.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "agent/job_spec.h"
#include "agent/protocol.h"
#include "common/bytes.h"
#include "common/error.h"

using Catch::Matchers::ContainsSubstring;
using hvd::agent::FrameReader;
using hvd::agent::FrameType;
using hvd::agent::kMaxFramePayload;

namespace {

using namespace std::string_literals;

// Runs `fn`, requires an hvd::Error whose message contains every needle.
template <typename Fn>
void require_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    FAIL("expected an hvd::Error");
  } catch (const hvd::Error& e) {
    INFO("message: " << e.what() << "\nhint: " << e.hint());
    for (const std::string& needle : needles) CHECK_THAT(e.what(), ContainsSubstring(needle));
  }
}

std::string header(uint32_t length, uint8_t type) {
  std::string out;
  for (int shift : {24, 16, 8, 0}) out += static_cast<char>((length >> shift) & 0xff);
  out += static_cast<char>(type);
  return out;
}

struct TestFrames {
  std::vector<hvd::agent::Frame> frames;
  std::string wire;
};

// A mix of every frame type and size, including empty payloads, NUL and high bytes, and one
// frame far larger than the readers' chunks; enough bytes in all that the reader compacts.
TestFrames test_frames() {
  TestFrames t;
  std::mt19937 rng(12345);
  const std::vector<FrameType> types{
      FrameType::kHello,       FrameType::kStarted,    FrameType::kOutput,
      FrameType::kExited,      FrameType::kError,      FrameType::kDone,
      FrameType::kSpec,        FrameType::kTerminate,  FrameType::kKill,
      FrameType::kListening,   FrameType::kProbe,      FrameType::kProbeListen,
      FrameType::kProbeResult, FrameType::kProbeClose, FrameType::kProbeClosed};
  for (int i = 0; i < 1500; ++i) {
    hvd::agent::Frame f;
    f.type = types[static_cast<size_t>(i) % types.size()];
    const size_t size = i % 7 == 0 ? 0 : rng() % 200;
    for (size_t k = 0; k < size; ++k) f.payload += static_cast<char>(rng() & 0xff);
    t.frames.push_back(f);
  }
  t.frames.push_back({FrameType::kOutput, std::string(300000, '\0') + "end\n"});
  t.frames.push_back({FrameType::kDone, ""});
  for (const auto& f : t.frames) t.wire += hvd::agent::encode_frame(f.type, f.payload);
  return t;
}

void check_same_frames(const std::vector<hvd::agent::Frame>& got,
                       const std::vector<hvd::agent::Frame>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("frame " << i);
    REQUIRE(got[i].type == want[i].type);
    REQUIRE(got[i].payload == want[i].payload);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Frames

TEST_CASE("encode_frame writes a big-endian length and the type", "[protocol]") {
  CHECK(hvd::agent::encode_frame(FrameType::kDone, "") == header(0, 6));
  CHECK(hvd::agent::encode_frame(FrameType::kSpec, "abc") == header(3, 16) + "abc");
  const std::string big(0x010203, 'x');
  CHECK(hvd::agent::encode_frame(FrameType::kOutput, big).substr(0, 5) == header(0x010203, 3));
}

TEST_CASE("FrameReader fed byte by byte gives back the same frames", "[protocol]") {
  const TestFrames t = test_frames();
  FrameReader reader;
  std::vector<hvd::agent::Frame> got;
  for (char c : t.wire) {
    reader.feed(std::string_view(&c, 1));
    while (auto f = reader.next()) got.push_back(std::move(*f));
  }
  check_same_frames(got, t.frames);
  CHECK(reader.buffered() == 0);
  CHECK_FALSE(reader.next().has_value());
}

TEST_CASE("FrameReader fed random chunks gives back the same frames", "[protocol]") {
  const TestFrames t = test_frames();
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    FrameReader reader;
    std::vector<hvd::agent::Frame> got;
    size_t at = 0;
    while (at < t.wire.size()) {
      // Mostly small chunks, sometimes large ones that hold many frames at once.
      const size_t want = rng() % 4 == 0 ? rng() % 70000 : rng() % 16;
      const size_t n = std::min(want + 1, t.wire.size() - at);
      reader.feed(std::string_view(t.wire).substr(at, n));
      at += n;
      // Sometimes take only one frame per feed, so bytes pile up in the reader.
      if (rng() % 3 == 0) {
        if (auto f = reader.next()) got.push_back(std::move(*f));
      } else {
        while (auto f = reader.next()) got.push_back(std::move(*f));
      }
    }
    while (auto f = reader.next()) got.push_back(std::move(*f));
    check_same_frames(got, t.frames);
    CHECK(reader.buffered() == 0);
  }
}

TEST_CASE("FrameReader waits for the rest of a header and of a payload", "[protocol]") {
  FrameReader reader;
  const std::string wire = hvd::agent::encode_frame(FrameType::kError, R"({"message":"x"})");
  reader.feed(wire.substr(0, 4));
  CHECK_FALSE(reader.next().has_value());
  reader.feed(wire.substr(4, 3));
  CHECK_FALSE(reader.next().has_value());
  CHECK(reader.buffered() == 7);
  reader.feed(wire.substr(7));
  const auto frame = reader.next();
  REQUIRE(frame.has_value());
  CHECK(frame->type == FrameType::kError);
  CHECK(frame->payload == R"({"message":"x"})");
}

TEST_CASE("FrameReader accepts a header of exactly kMaxFramePayload", "[protocol]") {
  FrameReader reader;
  reader.feed(header(kMaxFramePayload, static_cast<uint8_t>(FrameType::kSpec)));
  CHECK_NOTHROW(reader.next());
  CHECK_FALSE(reader.next().has_value());  // waits for 16 MiB of payload
}

TEST_CASE("FrameReader refuses a frame longer than kMaxFramePayload", "[protocol]") {
  FrameReader reader;
  reader.feed(header(kMaxFramePayload + 1, static_cast<uint8_t>(FrameType::kSpec)));
  require_error([&] { reader.next(); }, {"protocol error"});
}

TEST_CASE("FrameReader refuses text where a frame should be", "[protocol]") {
  // The usual cause: a login script printing on the agent's stdout.
  FrameReader reader;
  reader.feed("Welcome to Ubuntu 22.04 LTS\n");
  try {
    reader.next();
    FAIL("expected an hvd::Error");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), ContainsSubstring("protocol error"));
    CHECK_THAT(e.what(), ContainsSubstring("Welcome"));  // shows what came instead
    CHECK_THAT(e.hint(), ContainsSubstring("login script"));
  }
}

TEST_CASE("FrameReader refuses unknown frame types", "[protocol]") {
  for (uint8_t type : {0, 15, 27, 255}) {
    INFO("type " << static_cast<int>(type));
    FrameReader reader;
    reader.feed(header(0, type));
    require_error([&] { reader.next(); }, {"protocol error"});
  }
  for (uint8_t type : {1, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 18, 19, 20, 21, 22, 23, 24, 25, 26}) {
    INFO("type " << static_cast<int>(type));
    FrameReader reader;
    reader.feed(header(0, type));
    std::optional<hvd::agent::Frame> frame;
    REQUIRE_NOTHROW(frame = reader.next());
    REQUIRE(frame.has_value());
    CHECK(static_cast<int>(frame->type) == type);
  }
}

TEST_CASE("FrameReader refuses a bad frame after good ones", "[protocol]") {
  FrameReader reader;
  reader.feed(hvd::agent::encode_frame(FrameType::kDone, "") + header(3, 99) + "abc");
  const auto first = reader.next();
  REQUIRE(first.has_value());
  CHECK(first->type == FrameType::kDone);
  require_error([&] { reader.next(); }, {"protocol error"});
}

// ---------------------------------------------------------------------------------------------
// Packed payloads

TEST_CASE("output payloads round-trip bytes of both streams", "[protocol]") {
  std::string bytes = "line\n\0\xff\xfe\r partial"s;
  for (auto stream : {hvd::agent::Stream::kStdout, hvd::agent::Stream::kStderr}) {
    for (uint32_t rank : {0u, 1u, 4095u, 0xffffffffu}) {
      const auto decoded =
          hvd::agent::decode_output(hvd::agent::encode_output({rank, stream, bytes}));
      CHECK(decoded.rank == rank);
      CHECK(decoded.stream == stream);
      CHECK(decoded.bytes == bytes);
    }
  }
  const auto empty =
      hvd::agent::decode_output(hvd::agent::encode_output({7, hvd::agent::Stream::kStderr, ""}));
  CHECK(empty.rank == 7);
  CHECK(empty.bytes.empty());
}

TEST_CASE("started and exited payloads round-trip", "[protocol]") {
  for (uint32_t v : {0u, 1u, 255u, 256u, 65536u, 0x7fffffffu, 0xffffffffu}) {
    const auto started =
        hvd::agent::decode_started(hvd::agent::encode_started({v, v ^ 0x5a5a5a5au}));
    CHECK(started.rank == v);
    CHECK(started.pid == (v ^ 0x5a5a5a5au));
    for (bool signaled : {false, true}) {
      for (bool stopped : {false, true}) {
        const auto exited = hvd::agent::decode_exited(
            hvd::agent::encode_exited({v, signaled, 255 - (v & 0xff), stopped}));
        CHECK(exited.rank == v);
        CHECK(exited.signaled == signaled);
        CHECK(exited.value == 255 - (v & 0xff));
        CHECK(exited.stopped == stopped);
      }
    }
  }
}

TEST_CASE("short or malformed packed payloads throw", "[protocol]") {
  const std::string output = hvd::agent::encode_output({1, hvd::agent::Stream::kStdout, ""});
  const std::string started = hvd::agent::encode_started({1, 2});
  const std::string exited = hvd::agent::encode_exited({1, true, 9});
  for (size_t n = 0; n < output.size(); ++n) {
    require_error([&] { hvd::agent::decode_output(output.substr(0, n)); }, {"output", "short"});
  }
  for (size_t n = 0; n < started.size(); ++n) {
    require_error([&] { hvd::agent::decode_started(started.substr(0, n)); }, {"started", "short"});
  }
  for (size_t n = 0; n < exited.size(); ++n) {
    require_error([&] { hvd::agent::decode_exited(exited.substr(0, n)); }, {"exited", "short"});
  }
  // A stream other than stdout (1) or stderr (2).
  for (char stream : {'\0', '\3', '\xff'}) {
    std::string bad = output;
    bad[4] = stream;
    require_error([&] { hvd::agent::decode_output(bad); }, {"stream"});
  }
  // Flags other than 1 (a signal) and 2 (after a stop).
  for (char flags : {'\4', '\x83', '\xff'}) {
    std::string bad = exited;
    bad[4] = flags;
    require_error([&] { hvd::agent::decode_exited(bad); }, {"exited", "flags"});
  }
}

// ---------------------------------------------------------------------------------------------
// Job spec

namespace {

hvd::agent::JobSpec sample_spec() {
  hvd::agent::JobSpec spec;
  spec.protocol = hvd::agent::kProtocolVersion;
  spec.host = "worker-1";
  spec.argv = {"./train", "--name=caf\xc3\xa9",        "\xff\xfe not utf-8", "two\nlines",
               "",        "tab\tand \"quotes\" and \\"};
  spec.cwd = "/data/run-\xe9";  // latin-1 directory name
  spec.grace_seconds = 2.5;
  hvd::agent::RankSpec r0;
  r0.rank = 0;
  r0.env = {{"HOROVOD_RANK", "0"},    {"BINARY", "\x80\x81\x82\0\xc0\xaf"s},
            {"MULTI", "a\nb\r\nc\n"}, {"EMPTY", ""},
            {"HAS_EQUALS", "k=v=w"},  {"_lower_ok9", "\xf0\x9f\x98\x80"}};
  hvd::agent::RankSpec r1;
  r1.rank = 5;
  r1.env = {{"HOROVOD_RANK", "5"}, {"SURROGATE", "\xed\xa0\x80"}};
  spec.ranks = {r0, r1};
  return spec;
}

std::string spec_with(const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json doc = nlohmann::json::parse(hvd::agent::encode_spec(sample_spec()));
  change(doc);
  return doc.dump();
}

}  // namespace

TEST_CASE("job spec round-trips argv and env bytes that are not UTF-8", "[protocol]") {
  const hvd::agent::JobSpec spec = sample_spec();
  const std::string text = hvd::agent::encode_spec(spec);
  // The text itself is valid JSON (and UTF-8), whatever the bytes inside.
  CHECK(hvd::is_valid_utf8(text));
  nlohmann::json doc;
  REQUIRE_NOTHROW(doc = nlohmann::json::parse(text));
  CHECK(doc["argv"][0] == "./train");        // text stays readable
  CHECK(doc["argv"][2].contains("base64"));  // bytes travel encoded
  CHECK(doc["ranks"][0]["env"][1][1].contains("base64"));
  CHECK(text.find('\n') == std::string::npos);  // one line of JSON

  const hvd::agent::JobSpec back = hvd::agent::decode_spec(text);
  CHECK(back == spec);
  CHECK(back.argv[2] == "\xff\xfe not utf-8");
  CHECK(back.ranks[0].env[1].second == "\x80\x81\x82\0\xc0\xaf"s);
  CHECK(back.ranks[0].env[1].second.size() == 6);
  CHECK(back.ranks[0].env[2].second == "a\nb\r\nc\n");
  CHECK(back.cwd == "/data/run-\xe9");
}

TEST_CASE("elastic frames: rank events and generation notices round-trip, bad ones throw",
          "[protocol]") {
  using hvd::agent::decode_generation;
  using hvd::agent::decode_rank_event;
  const auto event = decode_rank_event(hvd::agent::encode_rank_event({7, "joined 3"}));
  CHECK(event.worker == 7);
  CHECK(event.line == "joined 3");
  const auto notice = decode_generation(hvd::agent::encode_generation({4, {0, 2, 65536}}));
  CHECK(notice.generation == 4);
  CHECK(notice.workers == std::vector<uint32_t>{0, 2, 65536});
  CHECK(decode_generation(hvd::agent::encode_generation({1, {}})).workers.empty());

  require_error([] { decode_rank_event("abc"); }, {"too short"});
  require_error([] { decode_rank_event(std::string(4, '\0') + "two\nlines"); }, {"one line"});
  require_error(
      [] {
        decode_rank_event(std::string(4, '\0') +
                          std::string(hvd::agent::kMaxRankEventLine + 1, 'x'));
      },
      {"at most 256"});
  // A count that does not match the payload (a lie or a truncated frame) is refused, and a huge
  // count allocates nothing.
  std::string lying = hvd::agent::encode_generation({1, {5}});
  lying[7] = 2;
  require_error([&] { decode_generation(lying); }, {"for 2 workers"});
  lying[4] = '\xff';
  require_error([&] { decode_generation(lying); }, {"protocol error"});
  require_error([] { decode_generation("1234567"); }, {"too short"});
}

TEST_CASE("job spec carries the elastic flag, absent when false", "[protocol]") {
  hvd::agent::JobSpec spec = sample_spec();
  CHECK_FALSE(nlohmann::json::parse(hvd::agent::encode_spec(spec)).contains("elastic"));
  CHECK_FALSE(hvd::agent::decode_spec(hvd::agent::encode_spec(spec)).elastic);
  spec.elastic = true;
  CHECK(hvd::agent::decode_spec(hvd::agent::encode_spec(spec)) == spec);
  require_error(
      [] { hvd::agent::decode_spec(spec_with([](nlohmann::json& d) { d["elastic"] = 1; })); },
      {"'elastic' is not true or false"});
}

TEST_CASE("a ping carries the agent's silence limit in ms, any other size is refused",
          "[protocol]") {
  CHECK(hvd::agent::decode_ping(hvd::agent::encode_ping(60000)) == 60000);
  CHECK(hvd::agent::decode_ping(hvd::agent::encode_ping(0)) == 0);
  CHECK(hvd::agent::encode_ping(0x01020304) == std::string("\x01\x02\x03\x04", 4));
  require_error([] { hvd::agent::decode_ping(""); }, {"ping"});
  require_error([] { hvd::agent::decode_ping(std::string(5, '\0')); }, {"a ping of 5 bytes"});
}

TEST_CASE("job spec round-trips random binary values", "[protocol]") {
  std::mt19937 rng(99);
  hvd::agent::JobSpec spec = sample_spec();
  for (int i = 0; i < 50; ++i) {
    std::string value;
    const size_t size = rng() % 40;
    for (size_t k = 0; k < size; ++k) value += static_cast<char>(rng() & 0xff);
    spec.argv.push_back(value);
    spec.ranks[1].env.emplace_back("V" + std::to_string(i), value);
  }
  CHECK(hvd::agent::decode_spec(hvd::agent::encode_spec(spec)) == spec);
}

TEST_CASE("decode_spec rejects a wrong protocol version", "[protocol]") {
  const std::string text = spec_with([](nlohmann::json& d) { d["protocol"] = 99; });
  try {
    hvd::agent::decode_spec(text);
    FAIL("expected an hvd::Error");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), ContainsSubstring("protocol 99"));
    CHECK_THAT(e.what(), ContainsSubstring(std::to_string(hvd::agent::kProtocolVersion)));
    CHECK_THAT(e.hint(), ContainsSubstring("same hvdrun version"));
  }
}

TEST_CASE("decode_spec rejects an empty command", "[protocol]") {
  require_error(
      [] {
        hvd::agent::decode_spec(spec_with([](auto& d) { d["argv"] = nlohmann::json::array(); }));
      },
      {"job spec", "command"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["argv"] = {""}; })); },
                {"job spec", "command"});
}

TEST_CASE("decode_spec rejects a relative working directory", "[protocol]") {
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["cwd"] = "data/run"; })); },
                {"working directory", "data/run", "absolute"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["cwd"] = ""; })); },
                {"working directory", "absolute"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d.erase("cwd"); })); },
                {"cwd"});
}

TEST_CASE("decode_spec rejects a spec without ranks", "[protocol]") {
  require_error(
      [] {
        hvd::agent::decode_spec(spec_with([](auto& d) { d["ranks"] = nlohmann::json::array(); }));
      },
      {"no ranks"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d.erase("ranks"); })); },
                {"'ranks'", "missing"});
  require_error(
      [] { hvd::agent::decode_spec(spec_with([](auto& d) { d["ranks"][0]["rank"] = "0"; })); },
      {"rank"});
}

TEST_CASE("decode_spec rejects bad environment variable names", "[protocol]") {
  for (const std::string name : {"1ABC", "A=B", "", "WITH SPACE", "DASH-NAME", "caf\xc3\xa9"}) {
    INFO("name '" << name << "'");
    const std::string text = spec_with([&](nlohmann::json& d) {
      d["ranks"][1]["env"].push_back({name, "value"});
    });
    require_error([&] { hvd::agent::decode_spec(text); }, {"rank 5", "not a valid variable name"});
  }
  require_error(
      [] {
        hvd::agent::decode_spec(spec_with([](auto& d) { d["ranks"][0]["env"] = {{"ONLY_NAME"}}; }));
      },
      {"rank 0", "env"});
}

TEST_CASE("decode_spec rejects text that is not a JSON object", "[protocol]") {
  for (const std::string text : {"", "not json", "{\"protocol\": 1", "[]", "42", "null"}) {
    INFO("text '" << text << "'");
    require_error([&] { hvd::agent::decode_spec(text); }, {"job spec", "JSON"});
  }
}

TEST_CASE("decode_spec names a missing or mistyped field", "[protocol]") {
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d.erase("argv"); })); },
                {"'argv'", "missing"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["argv"] = "./train"; })); },
                {"'argv'", "wrong type"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["protocol"] = "1"; })); },
                {"'protocol'", "wrong type"});
  require_error([] { hvd::agent::decode_spec(spec_with([](auto& d) { d["argv"][0] = 7; })); },
                {"argv"});
  require_error(
      [] {
        hvd::agent::decode_spec(spec_with([](auto& d) { d["argv"][0] = {{"base64", "!!"}}; }));
      },
      {"argv"});
  require_error(
      [] { hvd::agent::decode_spec(spec_with([](auto& d) { d["grace_seconds"] = -1; })); },
      {"grace"});
}

TEST_CASE("signal frames carry SIGUSR1 or SIGUSR2 and nothing else", "[protocol]") {
  CHECK(hvd::agent::decode_signal(hvd::agent::encode_signal(SIGUSR1)) == SIGUSR1);
  CHECK(hvd::agent::decode_signal(hvd::agent::encode_signal(SIGUSR2)) == SIGUSR2);
  for (const std::string& bad :
       {hvd::agent::encode_signal(SIGKILL), hvd::agent::encode_signal(SIGTERM), std::string(),
        hvd::agent::encode_signal(SIGUSR1) + "x"}) {
    require_error([&] { hvd::agent::decode_signal(bad); }, {"signal"});
  }
}
