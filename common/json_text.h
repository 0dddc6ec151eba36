// JSON string contents written by hand, where a target has no JSON library (libhvd: its stall
// reports, its timeline). Names in them are the user's: every '"', '\\' and control byte is
// escaped; other bytes pass as they are (a reader must cope with a name that is not UTF-8).
#pragma once

#include <string>
#include <string_view>

namespace hvd {

// `s` escaped for use between the quotes of a JSON string.
std::string json_escape(std::string_view s);

}  // namespace hvd
