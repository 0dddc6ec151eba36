// What the launcher asks one host's agent to run: the command, the directory, each local rank
// with its exact environment, and the grace period. Sent as JSON in a kSpec frame; argv,
// environment values and paths are bytes, so a value that is not UTF-8 travels as
// {"base64": "..."}. Environment values only ever travel here, never on a
// command line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::agent {

struct RankSpec {
  int rank = 0;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the agent's base env
  bool operator==(const RankSpec&) const = default;
};

struct JobSpec {
  int protocol = 0;
  std::string host;  // the host as the user wrote it, for messages
  std::vector<std::string> argv;
  std::string cwd;  // absolute
  std::vector<RankSpec> ranks;
  double grace_seconds = 5.0;
  // An elastic job (docs/design/elastic.md): each rank gets a channel to the agent on
  // contract::kElasticChannelFd, whose lines come back as kRankEvent frames.
  bool elastic = false;
  bool operator==(const JobSpec&) const = default;
};

std::string encode_spec(const JobSpec& spec);

// Parses and validates. Throws hvd::Error naming the field and what is wrong.
JobSpec decode_spec(std::string_view json_text);

}  // namespace hvd::agent
