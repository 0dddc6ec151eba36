#include "cli/config_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>

#include "common/error.h"
#include "common/fd_io.h"
#include "common/nearest.h"

namespace hvd::cli {
namespace {

// One key of the file: the flag it stands for. A boolean key gives `flag` when true and
// `off_flag` when false (nothing when off_flag is empty); `family` are the command-line flags
// that override it (empty: just flag and off_flag).
struct Key {
  std::string_view section;
  std::string_view key;
  bool boolean;
  std::string_view flag;
  std::string_view off_flag = {};
  std::span<const std::string_view> family = {};
};

constexpr std::array<std::string_view, 4> kTimestampFlags{
    "--log-with-timestamp", "--log-without-timestamp", "--log-hide-timestamp",
    "--no-log-hide-timestamp"};

// horovodrun 0.28.1's keys (config_parser.py), and the sample file's logging.hide_timestamp,
// which horovodrun never reads: hvdrun honours it.
constexpr std::array<Key, 24> kKeys{{
    {"params", "fusion_threshold_mb", false, "--fusion-threshold-mb"},
    {"params", "cycle_time_ms", false, "--cycle-time-ms"},
    {"params", "cache_capacity", false, "--cache-capacity"},
    {"params", "hierarchical_allreduce", true, "--hierarchical-allreduce",
     "--no-hierarchical-allreduce"},
    {"params", "hierarchical_allgather", true, "--hierarchical-allgather",
     "--no-hierarchical-allgather"},
    {"params", "torus_allreduce", true, "--torus-allreduce", "--no-torus-allreduce"},
    {"autotune", "enabled", true, "--autotune", "--no-autotune"},
    {"autotune", "log_file", false, "--autotune-log-file"},
    {"autotune", "warmup_samples", false, "--autotune-warmup-samples"},
    {"autotune", "steps_per_sample", false, "--autotune-steps-per-sample"},
    {"autotune", "bayes_opt_max_samples", false, "--autotune-bayes-opt-max-samples"},
    {"autotune", "gaussian_process_noise", false, "--autotune-gaussian-process-noise"},
    {"timeline", "filename", false, "--timeline-filename"},
    {"timeline", "mark_cycles", true, "--timeline-mark-cycles"},
    {"stall_check", "enabled", true, "--stall-check", "--no-stall-check"},
    {"stall_check", "warning_time_seconds", false, "--stall-check-warning-time-seconds"},
    {"stall_check", "shutdown_time_seconds", false, "--stall-check-shutdown-time-seconds"},
    {"library_options", "mpi_threads_disable", true, "--mpi-threads-disable"},
    {"library_options", "num_nccl_streams", false, "--num-nccl-streams"},
    {"library_options", "thread_affinity", false, "--thread-affinity"},
    {"library_options", "gloo_timeout_seconds", false, "--gloo-timeout-seconds"},
    {"logging", "level", false, "--log-level"},
    {"logging", "with_timestamp", true, "--log-with-timestamp", "--log-without-timestamp",
     kTimestampFlags},
    {"logging", "hide_timestamp", true, "--log-without-timestamp", "--log-with-timestamp",
     kTimestampFlags},
}};

constexpr std::array<std::string_view, 7> kSections{
    "controller", "params", "autotune", "timeline", "stall_check", "library_options", "logging"};
constexpr std::array<std::string_view, 3> kControllerFlags{"--mpi", "--gloo", "--native"};

class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& message,
                         const std::string& hint) const {
    // yaml-cpp counts lines and columns from 0; editors and compilers from 1.
    throw UsageError(fmt::format("{}:{}:{}: {}", name_, mark.line + 1, mark.column + 1, message),
                     hint);
  }

  std::string where(const YAML::Node& node) const {
    return fmt::format("{}:{}:{}", name_, node.Mark().line + 1, node.Mark().column + 1);
  }

  // The key's one value, as text.
  std::string scalar(const YAML::Node& value, const std::string& key) const {
    if (value.IsNull()) {
      fail(value.Mark(), fmt::format("{} has no value", key), "give it one, or remove the key");
    }
    if (!value.IsScalar()) {
      fail(value.Mark(), fmt::format("{} must be a single value, not a list or a section", key),
           "e.g. cycle_time_ms: 5");
    }
    return value.Scalar();
  }

  bool boolean(const YAML::Node& value, const std::string& key) const {
    const std::string text = scalar(value, key);
    bool b = false;
    if (!YAML::convert<bool>::decode(value, b)) {
      fail(value.Mark(), fmt::format("{}: '{}' is not true or false", key, text),
           fmt::format("e.g. {}: true", key.substr(key.find('.') + 1)));
    }
    return b;
  }

  void controller(const YAML::Node& value, std::vector<ConfigSetting>& out) const {
    // horovodrun lower-cases it: "GLOO" and "Mpi" are accepted as well.
    std::string text = scalar(value, "controller");
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (text != "gloo" && text != "mpi") {
      fail(value.Mark(), fmt::format("controller: '{}' is not gloo or mpi", text),
           "controller: gloo launches natively (hvdrun's agents), mpi through mpirun");
    }
    out.push_back({"controller",
                   where(value),
                   {text == "mpi" ? "--mpi" : "--gloo"},
                   {kControllerFlags.begin(), kControllerFlags.end()}});
  }

  void section(const std::string& name, const YAML::Node& body,
               std::vector<ConfigSetting>& out) const {
    if (body.IsNull()) return;  // "params:" with nothing under it
    if (!body.IsMap()) {
      fail(body.Mark(), fmt::format("{} must be a section of keys", name),
           fmt::format("e.g.\n{}:\n  {}: ...", name, first_key(name)));
    }
    for (const auto& item : body) {
      const std::string key = item.first.Scalar();
      const Key* known = find(name, key);
      if (known == nullptr) unknown_key(item.first, name, key);
      const std::string dotted = name + "." + key;
      ConfigSetting setting{dotted, where(item.second), {}, {}};
      if (known->boolean) {
        const bool on = boolean(item.second, dotted);
        const std::string_view flag = on ? known->flag : known->off_flag;
        if (flag.empty()) continue;  // false for a flag without an opposite: nothing to set
        setting.args = {std::string(flag)};
      } else {
        setting.args = {std::string(known->flag), scalar(item.second, dotted)};
      }
      if (known->family.empty()) {
        setting.conflicts = {std::string(known->flag)};
        if (!known->off_flag.empty()) setting.conflicts.emplace_back(known->off_flag);
      } else {
        setting.conflicts.assign(known->family.begin(), known->family.end());
      }
      // A key given again replaces its first setting (PyYAML's last-wins), found by name.
      if (const auto [at, fresh] = index_.try_emplace(dotted, out.size()); !fresh) {
        out[at->second] = std::move(setting);
      } else {
        out.push_back(std::move(setting));
      }
    }
  }

  [[noreturn]] void unknown_section(const YAML::Node& key_node, const std::string& name) const {
    const auto near = nearest_name(name, kSections);
    fail(key_node.Mark(),
         fmt::format("unknown section '{}'{}", name,
                     near ? fmt::format(" (did you mean {}?)", *near) : ""),
         "the sections are controller, params, autotune, timeline, stall_check, "
         "library_options and logging; hosts, -np, SSH and elastic settings are command-line "
         "flags only (as in horovodrun)");
  }

 private:
  static const Key* find(const std::string& section, const std::string& key) {
    for (const Key& k : kKeys) {
      if (k.section == section && k.key == key) return &k;
    }
    return nullptr;
  }

  static std::string_view first_key(const std::string& section) {
    for (const Key& k : kKeys) {
      if (k.section == section) return k.key;
    }
    return "key";
  }

  [[noreturn]] void unknown_key(const YAML::Node& key_node, const std::string& section,
                                const std::string& key) const {
    std::vector<std::string_view> keys;
    for (const Key& k : kKeys) {
      if (k.section == section) keys.push_back(k.key);
    }
    const auto near = nearest_name(key, keys);
    std::string all;
    for (std::string_view k : keys) all += (all.empty() ? "" : ", ") + std::string(k);
    fail(key_node.Mark(),
         fmt::format("unknown key '{}' in section {}{}", key, section,
                     near ? fmt::format(" (did you mean {}?)", *near) : ""),
         fmt::format("{}'s keys: {}", section, all));
  }

  std::string name_;
  mutable std::unordered_map<std::string, size_t> index_;  // setting's key -> its place in out
};

}  // namespace

std::vector<ConfigSetting> parse_config_text(std::string_view text, const std::string& name) {
  Reader reader(name);
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    reader.fail(e.mark, fmt::format("not valid YAML: {}", e.msg),
                "horovodrun's config file format: sections of key: value lines");
  }
  std::vector<ConfigSetting> out;
  if (doc.IsNull()) return out;  // an empty file sets nothing
  if (!doc.IsMap()) {
    reader.fail(doc.Mark(), "the file must be a YAML mapping of sections",
                "e.g.\nparams:\n  fusion_threshold_mb: 32");
  }
  try {
    for (const auto& item : doc) {
      if (!item.first.IsScalar()) {
        reader.fail(item.first.Mark(), "a section's name must be a plain word", "e.g. params:");
      }
      const std::string section = item.first.Scalar();
      if (section == "controller") {
        reader.controller(item.second, out);
      } else if (std::find(kSections.begin(), kSections.end(), section) != kSections.end()) {
        reader.section(section, item.second, out);
      } else {
        reader.unknown_section(item.first, section);
      }
    }
  } catch (const YAML::Exception& e) {  // a key that is not a plain scalar, say
    reader.fail(e.mark, e.msg, "horovodrun's config file format: sections of key: value lines");
  }
  return out;
}

std::vector<ConfigSetting> load_config_file(const std::string& path) {
  return parse_config_text(read_user_file("--config-file", path, kMaxConfigFileBytes,
                                          "a config file holds a few sections of key: value lines"),
                           path);
}

}  // namespace hvd::cli
