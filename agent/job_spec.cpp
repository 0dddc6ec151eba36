#include "agent/job_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "agent/protocol.h"
#include "common/bytes.h"
#include "common/error.h"
#include "contract/env_table.h"

namespace hvd::agent {
namespace {

using json = nlohmann::json;

json encode_bytes(const std::string& bytes) {
  if (is_valid_utf8(bytes)) return bytes;
  return json{{"base64", base64_encode(bytes)}};
}

std::string decode_bytes(const json& value, std::string_view field) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("base64") && value["base64"].is_string()) {
    if (auto bytes = base64_decode(value["base64"].get<std::string>())) return *bytes;
  }
  throw Error(fmt::format("job spec: {} is neither a string nor {{\"base64\": ...}}", field));
}

const json& need(const json& doc, const char* key, json::value_t type) {
  if (!doc.contains(key)) throw Error(fmt::format("job spec: '{}' is missing", key));
  const json& value = doc[key];
  if (value.type() != type) throw Error(fmt::format("job spec: '{}' has the wrong type", key));
  return value;
}

void validate(const JobSpec& spec) {
  if (spec.protocol != kProtocolVersion) {
    throw Error(fmt::format("job spec: protocol {} but this agent speaks {}", spec.protocol,
                            kProtocolVersion),
                "use the same hvdrun version on every host");
  }
  if (spec.argv.empty() || spec.argv.front().empty()) {
    throw Error("job spec: 'argv' is empty: there is no command to run");
  }
  if (spec.cwd.empty() || spec.cwd.front() != '/') {
    throw Error(fmt::format("job spec: working directory '{}' is not absolute", spec.cwd));
  }
  if (spec.ranks.empty()) throw Error("job spec: no ranks for this host");
  if (!(spec.grace_seconds >= 0 && spec.grace_seconds <= 3600)) {
    throw Error(fmt::format("job spec: grace period {} s out of range", spec.grace_seconds));
  }
  for (const RankSpec& rank : spec.ranks) {
    if (rank.rank < 0) throw Error(fmt::format("job spec: negative rank {}", rank.rank));
    for (const auto& [name, value] : rank.env) {
      if (!contract::is_valid_env_name(name)) {
        throw Error(
            fmt::format("job spec: rank {}: '{}' is not a valid variable name", rank.rank, name));
      }
    }
  }
}

}  // namespace

std::string encode_spec(const JobSpec& spec) {
  json argv = json::array();
  for (const auto& a : spec.argv) argv.push_back(encode_bytes(a));
  json ranks = json::array();
  for (const RankSpec& r : spec.ranks) {
    json env = json::array();
    for (const auto& [name, value] : r.env) env.push_back({name, encode_bytes(value)});
    ranks.push_back({{"rank", r.rank}, {"env", std::move(env)}});
  }
  json doc = {{"protocol", spec.protocol}, {"host", spec.host},
              {"argv", std::move(argv)},   {"cwd", encode_bytes(spec.cwd)},
              {"ranks", std::move(ranks)}, {"grace_seconds", spec.grace_seconds}};
  if (spec.elastic) doc["elastic"] = true;
  return doc.dump();  // every byte string was made UTF-8 (or base64) above
}

JobSpec decode_spec(std::string_view json_text) {
  const json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) throw Error("job spec: not a JSON object");
  JobSpec spec;
  const auto protocol = need(doc, "protocol", json::value_t::number_unsigned).get<uint64_t>();
  spec.protocol = protocol > 1000 ? -1 : static_cast<int>(protocol);
  spec.host = need(doc, "host", json::value_t::string).get<std::string>();
  for (const json& a : need(doc, "argv", json::value_t::array)) {
    spec.argv.push_back(decode_bytes(a, "argv"));
  }
  spec.cwd = decode_bytes(doc.value("cwd", json()), "cwd");
  for (const json& r : need(doc, "ranks", json::value_t::array)) {
    if (!r.is_object() || !r.contains("rank") || !r["rank"].is_number_integer()) {
      throw Error("job spec: a rank entry has no integer 'rank'");
    }
    RankSpec rank;
    rank.rank = r["rank"].get<int>();
    for (const json& kv : need(r, "env", json::value_t::array)) {
      if (!kv.is_array() || kv.size() != 2 || !kv[0].is_string()) {
        throw Error(fmt::format("job spec: rank {}: an env entry is not [name, value]", rank.rank));
      }
      rank.env.emplace_back(kv[0].get<std::string>(), decode_bytes(kv[1], "an env value"));
    }
    spec.ranks.push_back(std::move(rank));
  }
  if (doc.contains("grace_seconds") && doc["grace_seconds"].is_number()) {
    spec.grace_seconds = doc["grace_seconds"].get<double>();
  }
  if (doc.contains("elastic")) {
    if (!doc["elastic"].is_boolean()) throw Error("job spec: 'elastic' is not true or false");
    spec.elastic = doc["elastic"].get<bool>();
  }
  validate(spec);
  return spec;
}

}  // namespace hvd::agent
