// The agent's hello as the launcher reads it (launcher/native/agent_conn.h, parse_hello): JSON
// whose missing or mistyped fields fall back to defaults. It never throws: any exception escapes
// and is a finding. Property: a payload that is not a JSON object reads as the defaults (protocol
// 0, which the launcher reports as another protocol).
#include <nlohmann/json.hpp>

#include "launcher/native/agent_conn.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string payload(hvd::fuzz::as_text(data, size));
  const auto hello = hvd::launcher::parse_hello(payload);
  if (!nlohmann::json::parse(payload, nullptr, false).is_object()) {
    HVD_FUZZ_CHECK(hello.protocol == 0 && hello.version.empty() && hello.interfaces.empty());
  }
  return 0;
}
