// The byte helpers under the wire format (common/bytes.h): UTF-8 validation and base64, which
// carry argv and environment values that are not text.
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "common/bytes.h"

using namespace std::string_literals;

// ---------------------------------------------------------------------------------------------
// UTF-8 and base64 (common/bytes.h)

TEST_CASE("is_valid_utf8 accepts well-formed text", "[bytes]") {
  CHECK(hvd::is_valid_utf8(""));
  CHECK(hvd::is_valid_utf8("plain ascii\n\t"));
  CHECK(hvd::is_valid_utf8("nul\0inside"s));
  CHECK(hvd::is_valid_utf8("\x7f"));
  CHECK(hvd::is_valid_utf8("\xc2\x80"));          // U+0080, smallest 2-byte
  CHECK(hvd::is_valid_utf8("caf\xc3\xa9"));       // é
  CHECK(hvd::is_valid_utf8("\xe0\xa0\x80"));      // U+0800, smallest 3-byte
  CHECK(hvd::is_valid_utf8("\xe2\x82\xac"));      // €
  CHECK(hvd::is_valid_utf8("\xed\x9f\xbf"));      // U+D7FF, just below the surrogates
  CHECK(hvd::is_valid_utf8("\xee\x80\x80"));      // U+E000, just above
  CHECK(hvd::is_valid_utf8("\xef\xbf\xbf"));      // U+FFFF
  CHECK(hvd::is_valid_utf8("\xf0\x90\x80\x80"));  // U+10000, smallest 4-byte
  CHECK(hvd::is_valid_utf8("\xf0\x9f\x98\x80"));  // 😀
  CHECK(hvd::is_valid_utf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the last code point
  CHECK(hvd::is_valid_utf8("a\xf0\x9f\x98\x80z\xc3\xa9"));
}

TEST_CASE("is_valid_utf8 refuses malformed sequences", "[bytes]") {
  // Overlong forms.
  CHECK_FALSE(hvd::is_valid_utf8("\xc0\xaf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xc1\xbf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xc0\x80"));  // "modified UTF-8" NUL
  CHECK_FALSE(hvd::is_valid_utf8("\xe0\x80\xaf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xe0\x9f\xbf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xf0\x80\x80\xaf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xf0\x8f\xbf\xbf"));
  // Surrogates (CESU-8).
  CHECK_FALSE(hvd::is_valid_utf8("\xed\xa0\x80"));
  CHECK_FALSE(hvd::is_valid_utf8("\xed\xbf\xbf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xed\xa0\xbd\xed\xb8\x80"));
  // Past U+10FFFF and bytes that never occur.
  CHECK_FALSE(hvd::is_valid_utf8("\xf4\x90\x80\x80"));
  CHECK_FALSE(hvd::is_valid_utf8("\xf5\x80\x80\x80"));
  CHECK_FALSE(hvd::is_valid_utf8("\xf8\x88\x80\x80\x80"));
  CHECK_FALSE(hvd::is_valid_utf8("\xfe"));
  CHECK_FALSE(hvd::is_valid_utf8("\xff"));
  // Truncated sequences, at the end and before another character.
  CHECK_FALSE(hvd::is_valid_utf8("\xc3"));
  CHECK_FALSE(hvd::is_valid_utf8("abc\xe2\x82"));
  CHECK_FALSE(hvd::is_valid_utf8("\xf0\x9f\x98"));
  CHECK_FALSE(
      hvd::is_valid_utf8("\xc3"
                         "A"));
  CHECK_FALSE(
      hvd::is_valid_utf8("\xe2\x82"
                         "A"));
  CHECK_FALSE(
      hvd::is_valid_utf8("\xf0\x9f\x98"
                         "A"));
  // A continuation byte with no lead.
  CHECK_FALSE(hvd::is_valid_utf8("\x80"));
  CHECK_FALSE(hvd::is_valid_utf8("a\xbf"));
  CHECK_FALSE(hvd::is_valid_utf8("\xc3\xa9\xa9"));
}

TEST_CASE("base64 matches the RFC 4648 test vectors", "[bytes]") {
  const std::vector<std::pair<std::string, std::string>> vectors{{"", ""},
                                                                 {"f", "Zg=="},
                                                                 {"fo", "Zm8="},
                                                                 {"foo", "Zm9v"},
                                                                 {"foob", "Zm9vYg=="},
                                                                 {"fooba", "Zm9vYmE="},
                                                                 {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    INFO("'" << plain << "'");
    CHECK(hvd::base64_encode(plain) == encoded);
    const auto decoded = hvd::base64_decode(encoded);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == plain);
  }
  CHECK(hvd::base64_encode("\xff\xfe\xfd\x00"s) == "//79AA==");
  CHECK(hvd::base64_encode("\xfb\xff") == "+/8=");
}

TEST_CASE("base64 decodes without padding and across whitespace", "[bytes]") {
  CHECK(hvd::base64_decode("Zg") == std::optional<std::string>("f"));
  CHECK(hvd::base64_decode("Zm8") == std::optional<std::string>("fo"));
  CHECK(hvd::base64_decode("Zm9v\nYmFy\r\n") == std::optional<std::string>("foobar"));
  CHECK(hvd::base64_decode(" Zm9v YmE= ") == std::optional<std::string>("fooba"));
}

TEST_CASE("base64 refuses bytes outside its alphabet", "[bytes]") {
  CHECK_FALSE(hvd::base64_decode("Zm9v!").has_value());
  CHECK_FALSE(hvd::base64_decode("Zm9v-_").has_value());  // the URL-safe alphabet is not ours
  CHECK_FALSE(hvd::base64_decode("Zm\xc3\xa9").has_value());
  CHECK_FALSE(hvd::base64_decode("Zm9v\0"s).has_value());
}

TEST_CASE("base64 round-trips every byte and every length", "[bytes]") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t n = 0; n <= all.size(); ++n) {
    const std::string bytes = all.substr(all.size() - n);
    const std::string encoded = hvd::base64_encode(bytes);
    INFO("length " << n);
    CHECK(encoded.size() == (n + 2) / 3 * 4);
    CHECK(hvd::is_valid_utf8(encoded));
    const auto decoded = hvd::base64_decode(encoded);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == bytes);
  }
}
