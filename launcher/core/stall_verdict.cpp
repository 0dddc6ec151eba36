#include "launcher/core/stall_verdict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"

namespace hvd::launcher {
namespace {

constexpr size_t kOpsShown = 3;      // tensors named per block; the rest counted
constexpr size_t kFramesShown = 12;  // stack lines per rank on stderr (all in --json)

const nlohmann::json* field(const nlohmann::json& o, const char* key) {
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

[[noreturn]] void bad(const std::string& what) {
  throw Error("rank 0's stall report is malformed: " + what,
              "a libhvd of another version than this hvdrun's? Install the same release on "
              "every host");
}

std::vector<int> int_list(const nlohmann::json& o, const char* key) {
  const nlohmann::json* v = field(o, key);
  if (v == nullptr || !v->is_array()) bad(fmt::format("'{}' is not a list", key));
  std::vector<int> out;
  for (const auto& x : *v) {
    if (!x.is_number_integer()) bad(fmt::format("'{}' holds something other than ranks", key));
    out.push_back(x.get<int>());
  }
  return out;
}

std::string text(const nlohmann::json& o, const char* key) {
  const nlohmann::json* v = field(o, key);
  if (v == nullptr || !v->is_string()) bad(fmt::format("'{}' is not a string", key));
  return v->get<std::string>();
}

const RankInspection* inspection_of(const std::vector<RankInspection>& all, int rank) {
  for (const RankInspection& i : all) {
    if (i.rank == rank) return &i;
  }
  return nullptr;
}

std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  return fmt::format("ranks {}", fmt::join(ranks, ", "));
}

// "sleeping, 0% CPU, engine thread sleeping"
std::string process_text(const nlohmann::json& f) {
  if (!f.is_object()) return "its agent did not answer";
  const std::string state = f.value("state", "unknown");
  if (state == "gone") return "its process is gone";
  std::string out = fmt::format("pid {}: {}", f.value("pid", 0), state);
  if (f.contains("cpu_percent")) out += fmt::format(", {:.0f}% CPU", f.value("cpu_percent", 0.0));
  if (f.contains("engine")) out += fmt::format(", engine thread {}", f.value("engine", ""));
  return out;
}

}  // namespace

std::vector<StalledOp> parse_stall_report(std::string_view line) {
  const auto doc = nlohmann::json::parse(line, nullptr, false);
  if (!doc.is_object()) bad("not a JSON object");
  if (text(doc, "kind") != "stall") bad("not a stall report");
  const nlohmann::json* set = field(doc, "process_set");
  if (set == nullptr || !set->is_number_integer()) bad("'process_set' is not a number");
  const std::string label = text(doc, "set_label");
  const nlohmann::json* tensors = field(doc, "tensors");
  if (tensors == nullptr || !tensors->is_array()) bad("'tensors' is not a list");
  std::vector<StalledOp> ops;
  for (const auto& t : *tensors) {
    if (!t.is_object()) bad("a tensor that is not an object");
    StalledOp op;
    op.op = text(t, "op");
    op.tensor = text(t, "tensor");
    op.process_set = set->get<int>();
    op.set_label = label;
    const nlohmann::json* seconds = field(t, "seconds");
    if (seconds == nullptr || !seconds->is_number()) bad("'seconds' is not a number");
    op.seconds = seconds->get<double>();
    op.waiting = int_list(t, "waiting");
    const nlohmann::json* missing = field(t, "missing");
    if (missing == nullptr || !missing->is_array()) bad("'missing' is not a list");
    for (const auto& m : *missing) {
      if (!m.is_object() || !m.contains("rank") || !m["rank"].is_number_integer()) {
        bad("a missing rank without its number");
      }
      StalledOp::Missing who{m["rank"].get<int>(), {}};
      const nlohmann::json* submitted = field(m, "submitted");
      if (submitted == nullptr || !submitted->is_array()) bad("'submitted' is not a list");
      for (const auto& s : *submitted) {
        if (!s.is_string()) bad("'submitted' holds something other than names");
        who.submitted.push_back(s.get<std::string>());
      }
      op.missing.push_back(std::move(who));
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

nlohmann::json clean_inspection(const nlohmann::json& raw) {
  nlohmann::json out = nlohmann::json::object();
  if (!raw.is_object()) return out;
  for (const char* key : {"state", "engine", "stack_note"}) {
    if (const nlohmann::json* v = field(raw, key); v != nullptr && v->is_string()) out[key] = *v;
  }
  for (const char* key : {"pid", "threads"}) {
    if (const nlohmann::json* v = field(raw, key); v != nullptr && v->is_number_integer()) {
      out[key] = *v;
    }
  }
  for (const char* key : {"cpu_percent", "cpu_seconds"}) {
    if (const nlohmann::json* v = field(raw, key); v != nullptr && v->is_number()) out[key] = *v;
  }
  if (const nlohmann::json* v = field(raw, "stack"); v != nullptr && v->is_array()) {
    nlohmann::json stack = nlohmann::json::array();
    for (const auto& line : *v) {
      if (line.is_string() && stack.size() < 1000) stack.push_back(line);
    }
    out["stack"] = std::move(stack);
  }
  return out;
}

std::vector<int> missing_ranks(const std::vector<StalledOp>& ops) {
  std::set<int> ranks;
  for (const StalledOp& op : ops) {
    for (const auto& m : op.missing) ranks.insert(m.rank);
  }
  return {ranks.begin(), ranks.end()};
}

std::vector<std::string> render_verdict(const std::vector<StalledOp>& ops,
                                        const std::vector<RankInspection>& inspections) {
  // One block per set of missing ranks: a hang of a whole model is one line, not hundreds.
  std::map<std::vector<int>, std::vector<const StalledOp*>> blocks;
  for (const StalledOp& op : ops) {
    std::vector<int> who;
    for (const auto& m : op.missing) who.push_back(m.rank);
    blocks[who].push_back(&op);
  }
  std::vector<std::string> lines;
  for (const auto& [who, stalled] : blocks) {
    const StalledOp& first = *stalled.front();
    std::vector<std::string> names;
    for (size_t i = 0; i < stalled.size() && i < kOpsShown; ++i) {
      names.push_back(fmt::format("{} '{}'", stalled[i]->op, stalled[i]->tensor));
    }
    std::string ops_text = fmt::format("{}", fmt::join(names, ", "));
    if (stalled.size() > kOpsShown) {
      ops_text += fmt::format(" and {} more", stalled.size() - kOpsShown);
    }
    if (first.op == "init") {
      // Ranks the rendezvous server never heard from (NativeJob's start-up watch).
      lines.push_back(
          fmt::format("stall: {} {} not called hvd.init(), which {} {} waited in for {:.1f} s",
                      ranks_text(who), who.size() == 1 ? "has" : "have", ranks_text(first.waiting),
                      first.waiting.size() == 1 ? "has" : "have", first.seconds));
    } else if (first.op == "negotiation") {
      // A cycle the missing ranks' engines never answered: their processes are frozen, unless
      // their agents found them alive (running or sleeping, engine thread there): then what
      // is between them and rank 0 is, a link cut or stalled.
      const bool alive = std::all_of(who.begin(), who.end(), [&](int rank) {
        const RankInspection* found = inspection_of(inspections, rank);
        if (found == nullptr || !found->found.is_object()) return false;
        const std::string state = found->found.value("state", "unknown");
        return (state == "running" || state == "sleeping") && found->found.contains("engine");
      });
      const std::string why =
          alive ? fmt::format(
                      "{} alive: is the network between {} and rank 0 cut or "
                      "stalled?",
                      who.size() == 1 ? "its process is" : "their processes are",
                      who.size() == 1 ? "it" : "them")
                : fmt::format("frozen (stopped, in a debugger) or {} host stalled?",
                              who.size() == 1 ? "its" : "their");
      lines.push_back(fmt::format(
          "stall: {} {} not answered negotiation{}{}, which {} {} waited on for {:.1f} s: {}",
          ranks_text(who), who.size() == 1 ? "has" : "have",
          first.tensor.empty() ? "" : " (it brought '" + first.tensor + "')",
          first.set_label.empty() ? "" : " in " + first.set_label, ranks_text(first.waiting),
          first.waiting.size() == 1 ? "has" : "have", first.seconds, why));
    } else {
      lines.push_back(fmt::format(
          "stall: {} {} not submitted {}{}, which {} {} waited on for {:.1f} s", ranks_text(who),
          who.size() == 1 ? "has" : "have", ops_text,
          first.set_label.empty() ? "" : " in " + first.set_label, ranks_text(first.waiting),
          first.waiting.size() == 1 ? "has" : "have", first.seconds));
    }
    for (const int rank : who) {
      const RankInspection* found = inspection_of(inspections, rank);
      const std::string host = found != nullptr && !found->host.empty() ? found->host : "?";
      std::string line =
          fmt::format("  rank {} on {}: {}", rank, host,
                      found != nullptr ? process_text(found->found) : "its agent did not answer");
      for (const auto& m : first.missing) {
        if (m.rank != rank || m.submitted.empty()) continue;
        std::vector<std::string> quoted;
        for (const std::string& s : m.submitted) quoted.push_back("'" + s + "'");
        line += fmt::format("; it submitted {} instead: are the ranks calling different ops?",
                            fmt::join(quoted, ", "));
      }
      lines.push_back(line);
      if (found == nullptr || !found->found.is_object()) continue;
      const auto& f = found->found;
      if (f.contains("stack") && f["stack"].is_array() && !f["stack"].empty()) {
        lines.push_back("    its Python stack (innermost first):");
        size_t shown = 0;
        for (const auto& frame : f["stack"]) {
          if (shown++ == kFramesShown) {
            lines.push_back(
                fmt::format("        ... ({} lines in all: --json has them)", f["stack"].size()));
            break;
          }
          const std::string text = frame.is_string() ? frame.get<std::string>() : "?";
          lines.push_back((text.starts_with("thread ") ? "      " : "        ") + text);
        }
      } else if (f.contains("stack_note")) {
        lines.push_back("    " + f.value("stack_note", ""));
      }
    }
  }
  return lines;
}

std::string verdict_summary(const std::vector<StalledOp>& ops,
                            const std::vector<RankInspection>& inspections) {
  const std::vector<std::string> lines = render_verdict(ops, inspections);
  if (lines.empty()) return "";
  std::string out = lines.front().substr(lines.front().starts_with("stall: ") ? 7 : 0);
  // The first block's missing ranks: its lines up to the next block's head.
  for (size_t i = 1; i < lines.size() && lines[i].starts_with("  "); ++i) {
    if (lines[i].starts_with("    ")) continue;  // a stack's lines
    const std::string rank_line = lines[i].substr(2);
    out += "; " + rank_line.substr(0, rank_line.find("; it submitted"));
    // Where it is: the innermost frame of the thread the dump calls current (the one that
    // took the signal: the main thread, as a rule), else of the first thread it shows.
    std::string first, current;
    bool in_current = false;
    for (size_t j = i + 1; j < lines.size() && lines[j].starts_with("    "); ++j) {
      if (!lines[j].starts_with("        ")) {  // a thread's head line (or the stack's)
        in_current = lines[j].find("(current)") != std::string::npos;
        continue;
      }
      const std::string frame = lines[j].substr(8);
      if (frame.starts_with("... (")) break;
      if (first.empty()) first = frame;
      if (in_current && current.empty()) current = frame;
    }
    if (!current.empty() || !first.empty()) out += ", at " + (current.empty() ? first : current);
  }
  return out;
}

std::string verdict_key(const std::vector<StalledOp>& ops,
                        const std::vector<RankInspection>& inspections) {
  nlohmann::json key = nlohmann::json::array();
  for (const StalledOp& op : ops) {
    nlohmann::json who = nlohmann::json::array();
    for (const auto& m : op.missing) who.push_back({m.rank, m.submitted});
    key.push_back({op.tensor, op.process_set, who});
  }
  for (const RankInspection& i : inspections) {
    const bool has = i.found.is_object();
    key.push_back({i.rank, has ? i.found.value("state", "") : "",
                   has && i.found.contains("stack") ? i.found["stack"] : nlohmann::json()});
  }
  return key.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::ordered_json stalls_json(const std::vector<StalledOp>& ops,
                                   const std::vector<RankInspection>& inspections) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const StalledOp& op : ops) {
    nlohmann::ordered_json missing = nlohmann::ordered_json::array();
    for (const auto& m : op.missing) {
      const RankInspection* found = inspection_of(inspections, m.rank);
      nlohmann::ordered_json entry = {{"rank", m.rank},
                                      {"host", found != nullptr ? found->host : ""}};
      const bool has = found != nullptr && found->found.is_object();
      entry["state"] = has ? found->found.value("state", "unknown") : "unknown";
      entry["pid"] = has && found->found.contains("pid") ? found->found["pid"] : nullptr;
      entry["cpu_percent"] =
          has && found->found.contains("cpu_percent") ? found->found["cpu_percent"] : nullptr;
      entry["engine"] = has && found->found.contains("engine") ? found->found["engine"] : nullptr;
      entry["stack"] =
          has && found->found.contains("stack") ? found->found["stack"] : nlohmann::json::array();
      entry["submitted"] = m.submitted.empty() ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(m.submitted);
      missing.push_back(std::move(entry));
    }
    out.push_back({{"op", op.op},
                   {"tensor", op.tensor},
                   {"process_set", op.process_set},
                   {"waiting", op.waiting},
                   {"seconds", op.seconds},
                   {"missing", std::move(missing)}});
  }
  return out;
}

}  // namespace hvd::launcher
