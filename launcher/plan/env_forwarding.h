// Which of the launcher's environment variables reach the ranks (docs/environment.md).
//
// Only by name: `-x NAME`, `-x NAME=value`, `-x 'PREFIX_*'`, `-x '*'` (everything forwardable,
// as horovodrun forwards its whole environment), plus a default allow-list (PATH,
// LD_LIBRARY_PATH, PYTHONPATH, PYTHONUNBUFFERED, CUDA_*, NCCL_*, HOROVOD_*, OMP_*). Never
// forwarded: HVD_* (hvdrun's internals), the per-rank contract variables (hvdrun sets them), and
// session variables of this terminal or login (SSH_*, TERM, DISPLAY, HOME, ...). Pure: the
// environment is an argument.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/env_table.h"

namespace hvd::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;

struct ForwardSpec {
  enum class Kind { kName, kAssign, kPrefix };
  Kind kind = Kind::kName;
  std::string name;   // the variable name, or the prefix for kPrefix
  std::string value;  // kAssign only
  std::string text;   // as the user wrote it, for messages

  bool operator==(const ForwardSpec&) const = default;
};

// Parses one -x argument ('*': a kPrefix spec with an empty prefix). Throws UsageError for an
// invalid name, a reserved (HVD_*), per-rank or session variable, or a malformed pattern.
ForwardSpec parse_forward_spec(std::string_view text);

using contract::is_valid_env_name;  // one rule for names, in the launcher<->rank contract
bool is_session_variable(std::string_view name);

struct ForwardedVar {
  std::string name;
  std::string value;
  bool explicit_spec = false;  // chosen by -x (its value is redacted in plans unless asked)
  bool operator==(const ForwardedVar&) const = default;
};

struct ForwardResult {
  std::vector<ForwardedVar> vars;  // sorted by name, each name once
  std::vector<std::string> warnings;
  // Entries of the launcher's environment that reach no rank (never-forwarded ones included).
  int not_forwarded = 0;
  // Of those, the entries `-x '*'` skipped because their name is no variable name (bash's
  // exported functions, BASH_FUNC_f%%).
  int invalid_names = 0;
  bool everything = false;  // -x '*' was given
};

// Applies the allow-list and `specs` (later specs win) to `launcher_env`.
ForwardResult forward_environment(const std::vector<ForwardSpec>& specs,
                                  const EnvList& launcher_env);

// The process's own environment (environ), as bytes.
EnvList current_environment();

}  // namespace hvd::launcher
