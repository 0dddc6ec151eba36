// horovodrun's YAML config file as `--config-file` reads it (cli/config_file.h,
// parse_config_text; yaml-cpp parses). UsageError is the documented refusal.
// Properties: every setting names a flag (its first word starts with "--"), the command-line
// flags that override it include the one it gives, and its place is "NAME:LINE:COL" in the file.
#include "cli/config_file.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto settings = hvd::fuzz::accepted<hvd::Error>(
      [&] { return hvd::cli::parse_config_text(hvd::fuzz::as_text(data, size), "fuzz.yaml"); });
  if (!settings) return 0;
  for (const hvd::cli::ConfigSetting& s : *settings) {
    HVD_FUZZ_CHECK(!s.args.empty() && s.args.size() <= 2);
    HVD_FUZZ_CHECK(s.args.front().starts_with("--"));
    bool overridden_by_itself = false;
    for (const std::string& c : s.conflicts) overridden_by_itself |= c == s.args.front();
    HVD_FUZZ_CHECK(overridden_by_itself);
    HVD_FUZZ_CHECK(s.where.starts_with("fuzz.yaml:"));
    HVD_FUZZ_CHECK(s.key == "controller" || s.key.find('.') != std::string::npos);
  }
  return 0;
}
