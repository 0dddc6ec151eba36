// The one way hvdrun writes a JSON document (--json, --dry-run --json, --check-ssh --json,
// --check-net --json): the reports are built as values, and the CLI serialises each once, here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hvd::launcher {

// Pretty-printed (2 spaces), newline-terminated. Strings in hvdrun's documents are bytes (argv,
// environment values, program output); what is not UTF-8 becomes U+FFFD.
inline std::string json_text(const nlohmann::ordered_json& doc) {
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace hvd::launcher
