// `--config-file FILE`: horovodrun's YAML file (sections controller, params, autotune, timeline,
// stall_check, library_options, logging), read into the hvdrun flags each key stands for.
//
// horovodrun's rule, which hvdrun keeps: a flag on the command line wins over the file wherever it
// appears (its help text says otherwise; its code and tests do this). So the file does not set
// anything itself: parse_options() puts each setting's flag in front of the command line's own
// unless the command line gives that flag or one of its `conflicts`.
// Errors are usage errors written `FILE:LINE:COL: ...`: YAML syntax, an unknown section or key
// (with the nearest known one), a value of the wrong shape; a value out of range is checked by
// the flag itself and reported at the key's place the same way (cli/options.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hvd::cli {

struct ConfigSetting {
  std::string key;                     // "params.cycle_time_ms"
  std::string where;                   // "FILE:LINE:COL" of its value
  std::vector<std::string> args;       // the flag and its value: {"--cycle-time-ms", "3"}
  std::vector<std::string> conflicts;  // command-line flags that override it (its own first)
};

// Reads YAML `text` (named `name` in errors). A key given twice in a section: the last one wins,
// as in horovodrun (PyYAML), one setting per key (linear in the file's size). Throws UsageError.
std::vector<ConfigSetting> parse_config_text(std::string_view text, const std::string& name);

// The largest file read (horovodrun's files are a few hundred bytes): a bigger one is a usage
// error naming the file and the bound, before any parsing.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// Reads the file. Throws UsageError (also when it cannot be read, or is over
// kMaxConfigFileBytes).
std::vector<ConfigSetting> load_config_file(const std::string& path);

}  // namespace hvd::cli
