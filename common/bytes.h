// Bytes that must cross text-only channels (JSON): argv, environment values and paths are byte
// strings on POSIX, and nlohmann-json throws on invalid UTF-8.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace hvd {

bool is_valid_utf8(std::string_view text);

std::string base64_encode(std::string_view bytes);

// Decodes standard base64 (padding optional, whitespace ignored); nullopt on any other byte.
std::optional<std::string> base64_decode(std::string_view text);

// Compares two secrets (tokens) in a time that depends on their length only, so that timing
// says nothing about how much of a guess was right.
bool same_secret(std::string_view a, std::string_view b);

}  // namespace hvd
