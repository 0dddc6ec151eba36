// The HOROVOD_* topology a rank reads from its environment (contract/topology.h,
// read_topology). The input is the environment, one NAME=VALUE a line (the first '=' splits; a
// later line wins). ContractError is the documented refusal. Properties: an accepted topology
// is consistent, and topology_env() writes it as an environment that reads back the same.
#include <map>
#include <string>

#include "common/error.h"
#include "contract/topology.h"
#include "tests/fuzz/fuzz_support.h"

namespace c = hvd::contract;

namespace {

using Env = std::map<std::string, std::string, std::less<>>;

c::EnvGetter getter(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(std::string_view(name));
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hvd::fuzz::as_text(data, size);
  Env env;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    const size_t eq = line.find('=');
    // A C environment cannot hold a NUL inside a value: such a line cannot reach a rank.
    if (eq != std::string_view::npos && line.find('\0') == std::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    start = end + 1;
  }
  const auto topology =
      hvd::fuzz::accepted<hvd::ContractError>([&] { return c::read_topology(getter(env)); });
  if (!topology || !*topology) return 0;
  const c::RankTopology& t = **topology;
  HVD_FUZZ_CHECK(t.rank >= 0 && t.rank < t.size);
  HVD_FUZZ_CHECK(t.local_rank >= 0 && t.local_rank < t.local_size && t.local_size <= t.size);
  HVD_FUZZ_CHECK(t.cross_rank >= 0 && t.cross_rank < t.cross_size && t.cross_size <= t.size);
  Env written;
  for (const auto& [name, value] : c::topology_env({0, t})) written[name] = value;
  HVD_FUZZ_CHECK(c::read_topology(getter(written)) == t);
  return 0;
}
