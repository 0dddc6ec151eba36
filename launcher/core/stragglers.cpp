#include "launcher/core/stragglers.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace hvd::launcher {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error("rank 0's hold figures are malformed: " + what,
              "a libhvd of another version than this hvdrun's? Install the same release on "
              "every host");
}

double number(const nlohmann::json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number() || it->get<double>() < 0) {
    bad(fmt::format("'{}' is not a number of 0 or more", key));
  }
  return it->get<double>();
}

std::uint64_t count(const nlohmann::json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned()) bad(fmt::format("'{}' is not a count", key));
  return it->get<std::uint64_t>();
}

}  // namespace

HoldFigures parse_hold_report(std::string_view line) {
  const auto doc = nlohmann::json::parse(line, nullptr, false);
  if (!doc.is_object()) bad("not a JSON object");
  if (!doc.contains("kind") || doc["kind"] != "holds") bad("not a hold report");
  HoldFigures f;
  if (!doc.contains("process_set") || !doc["process_set"].is_number_integer()) {
    bad("'process_set' is not a number");
  }
  f.process_set = doc["process_set"].get<int>();
  f.elapsed_s = number(doc, "elapsed_s");
  f.ops = count(doc, "ops");
  if (!doc.contains("final") || !doc["final"].is_boolean()) bad("'final' is not true or false");
  f.final = doc["final"].get<bool>();
  if (!doc.contains("ranks") || !doc["ranks"].is_array()) bad("'ranks' is not a list");
  for (const auto& r : doc["ranks"]) {
    if (!r.is_object() || !r.contains("rank") || !r["rank"].is_number_integer()) {
      bad("a rank without its number");
    }
    f.ranks.push_back({r["rank"].get<int>(), number(r, "held_s"), count(r, "last")});
  }
  return f;
}

std::vector<Straggler> find_stragglers(const HoldFigures& f) {
  std::vector<Straggler> out;
  if (f.ops < kMinOps || f.elapsed_s < kMinElapsed) return out;
  double total = 0;
  for (const HoldFigures::Rank& r : f.ranks) total += r.held_s;
  for (const HoldFigures::Rank& r : f.ranks) {
    const double share = r.held_s / f.elapsed_s;
    const double last_share = static_cast<double>(r.last) / static_cast<double>(f.ops);
    if (share >= kMinShare && r.held_s >= kMinDominance * total && last_share >= kMinLastShare) {
      out.push_back({r.rank, r.held_s, std::min(1.0, share), last_share});
    }
  }
  std::sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) {
    return a.others_waited_s > b.others_waited_s;
  });
  return out;
}

std::string straggler_line(const Straggler& s, const std::string& host, const HoldFigures& f) {
  return fmt::format(
      "straggler: rank {} on {} made the others wait {:.1f} s of {:.1f} s ({:.0f}%): it was the "
      "last to submit {:.0f}% of {} ops",
      s.rank, host.empty() ? "?" : host, s.others_waited_s, f.elapsed_s, 100 * s.share,
      100 * s.last_share, f.ops);
}

}  // namespace hvd::launcher
