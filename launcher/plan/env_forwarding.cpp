#include "launcher/plan/env_forwarding.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <span>

#include "common/error.h"
#include "contract/env_table.h"

extern char** environ;

namespace hvd::launcher {
namespace {

constexpr std::array<std::string_view, 4> kAllowNames{"PATH", "LD_LIBRARY_PATH", "PYTHONPATH",
                                                      "PYTHONUNBUFFERED"};
constexpr std::array<std::string_view, 4> kAllowPrefixes{"CUDA_", "NCCL_", "HOROVOD_", "OMP_"};

// Set by the terminal, the desktop or the login on each host: forwarding them would be wrong.
constexpr std::array<std::string_view, 21> kSessionNames{"TERM",
                                                         "TERMCAP",
                                                         "COLORTERM",
                                                         "DISPLAY",
                                                         "WAYLAND_DISPLAY",
                                                         "XAUTHORITY",
                                                         "TMUX",
                                                         "TMUX_PANE",
                                                         "STY",
                                                         "WINDOW",
                                                         "HOME",
                                                         "USER",
                                                         "LOGNAME",
                                                         "SHELL",
                                                         "MAIL",
                                                         "PWD",
                                                         "OLDPWD",
                                                         "SHLVL",
                                                         "_",
                                                         "LS_COLORS",
                                                         "DBUS_SESSION_BUS_ADDRESS"};
constexpr std::array<std::string_view, 2> kSessionPrefixes{"SSH_", "XDG_"};

bool starts_with_any(std::string_view name, std::span<const std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](std::string_view p) { return name.starts_with(p); });
}

bool is_internal(std::string_view name) { return name.starts_with(contract::kInternalPrefix); }

bool is_per_rank(std::string_view name) {
  const contract::EnvVar* var = contract::find_env_var(name);
  return var != nullptr && var->kind == contract::EnvKind::kPerRank;
}

// A name that may never be forwarded, explicitly or by pattern.
bool never_forwarded(std::string_view name) {
  return is_internal(name) || is_per_rank(name) || is_session_variable(name);
}

bool allow_listed(std::string_view name) {
  return std::find(kAllowNames.begin(), kAllowNames.end(), name) != kAllowNames.end() ||
         starts_with_any(name, kAllowPrefixes);
}

void reject_reserved(std::string_view name, std::string_view text) {
  if (is_internal(name)) {
    throw UsageError(fmt::format("-x {}: {}* variables are reserved for hvdrun itself", text,
                                 contract::kInternalPrefix),
                     "hvdrun sets them for every rank; choose another name");
  }
  if (is_per_rank(name)) {
    throw UsageError(fmt::format("-x {}: {} is set by hvdrun for each rank", text, name),
                     "drop this -x; every rank gets its own value (docs/environment.md)");
  }
  if (is_session_variable(name)) {
    throw UsageError(
        fmt::format("-x {}: {} belongs to this terminal or login session and is never forwarded",
                    text, name),
        "each host's login sets its own; pass the value under another name if a rank needs it");
  }
}

}  // namespace

bool is_session_variable(std::string_view name) {
  return std::find(kSessionNames.begin(), kSessionNames.end(), name) != kSessionNames.end() ||
         starts_with_any(name, kSessionPrefixes);
}

ForwardSpec parse_forward_spec(std::string_view text) {
  ForwardSpec spec;
  spec.text = std::string(text);
  const auto eq = text.find('=');
  std::string_view name = text.substr(0, eq);
  if (eq != std::string_view::npos) {
    spec.kind = ForwardSpec::Kind::kAssign;
    spec.value = std::string(text.substr(eq + 1));
  } else if (name.ends_with('*')) {
    spec.kind = ForwardSpec::Kind::kPrefix;
    name.remove_suffix(1);
    if (name.empty()) return spec;  // '*': every variable that may be forwarded
  }
  if (!is_valid_env_name(name)) {
    throw UsageError(
        fmt::format("-x '{}': '{}' is not a valid environment variable name", text, name),
        "use NAME, NAME=value or 'PREFIX_*'; names are letters, digits and '_', not starting "
        "with a digit");
  }
  reject_reserved(name, text);
  spec.name = std::string(name);
  return spec;
}

ForwardResult forward_environment(const std::vector<ForwardSpec>& specs,
                                  const EnvList& launcher_env) {
  std::map<std::string, ForwardedVar> chosen;
  for (const auto& [name, value] : launcher_env) {
    if (allow_listed(name) && !never_forwarded(name)) chosen[name] = {name, value, false};
  }
  ForwardResult result;
  for (const ForwardSpec& spec : specs) {
    switch (spec.kind) {
      case ForwardSpec::Kind::kAssign:
        chosen[spec.name] = {spec.name, spec.value, true};
        break;
      case ForwardSpec::Kind::kName: {
        auto it = std::find_if(launcher_env.begin(), launcher_env.end(),
                               [&](const auto& kv) { return kv.first == spec.name; });
        if (it == launcher_env.end()) {
          result.warnings.push_back(
              fmt::format("-x {}: not set in hvdrun's environment, so not forwarded", spec.name));
        } else {
          chosen[spec.name] = {spec.name, it->second, true};
        }
        break;
      }
      case ForwardSpec::Kind::kPrefix: {
        bool matched = false;
        for (const auto& [name, value] : launcher_env) {
          if (name.starts_with(spec.name) && is_valid_env_name(name) && !never_forwarded(name)) {
            chosen[name] = {name, value, true};
            matched = true;
          }
        }
        if (!matched) {
          result.warnings.push_back(
              fmt::format("-x '{}': no variable in hvdrun's environment matches", spec.text));
        }
        break;
      }
    }
  }
  result.everything = std::any_of(specs.begin(), specs.end(), [](const ForwardSpec& s) {
    return s.kind == ForwardSpec::Kind::kPrefix && s.name.empty();
  });
  for (const auto& [name, value] : launcher_env) {
    if (chosen.count(name) != 0) continue;
    ++result.not_forwarded;
    if (result.everything && !is_valid_env_name(name)) ++result.invalid_names;
  }
  for (auto& [name, var] : chosen) result.vars.push_back(std::move(var));
  return result;
}

EnvList current_environment() {
  EnvList env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry(*p);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

}  // namespace hvd::launcher
