#include "allreduce/engine/controller.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allreduce/kernels/dtype.h"

namespace hvd::runtime {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string device_text(const Device& d) {
  return d.kind == Device::Kind::kCUDA ? fmt::format("GPU (CUDA device {})", d.id) : "CPU";
}

std::size_t byte_size(const Request& r) {
  std::size_t n = 1;
  for (std::int64_t d : r.shape) n *= static_cast<std::size_t>(d);
  return n * element_size(r.dtype);
}

// Requests that may share one fused collective.
// GPU tensors are never fused: the fusion buffer is host memory.
bool fusable(const Request& a, const Request& b) {
  if (a.kind != b.kind || a.device != b.device || a.device.kind != Device::Kind::kCPU) {
    return false;
  }
  if (a.kind == OpKind::kAllreduce) {
    return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
           a.postscale == b.postscale;
  }
  if (a.kind == OpKind::kBroadcast) return a.root == b.root;
  return false;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

std::string group_text(const Request& r) {
  if (r.group == 0) return "it alone (in no group)";
  return fmt::format("it in a group of {} tensors (group id {:016x})", r.group_size, r.group);
}

std::string quoted(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

}  // namespace

Controller::Controller(ControllerOptions options) : options_(options) {}

int Controller::shown(int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  return r < options_.global_ranks.size() ? options_.global_ranks[r] : rank;
}

std::string Controller::where() const {
  return options_.set_label.empty() ? std::string() : " in " + options_.set_label;
}

void Controller::add(int rank, RequestList list, Clock::time_point now) {
  // Once a rank has left without a shutdown the job is broken: the fatal error fails every
  // pending op on every rank with HVD_ERR_PEER_LOST. A request that arrives after it must not get
  // an error of its own ("rank 1 already shut down"): that would be another status, and an
  // elastic loop would take the crash for a mistake of the program and end.
  if (!fatal_.empty()) return;
  std::vector<std::uint64_t> failed_seen;  // failed groups this list brought (failed_before)
  for (Request& request : list.requests) {
    if (request.group != 0 && failed_before(request, rank)) {
      failed_seen.push_back(request.group);
      continue;
    }
    if (failed_member(request, rank)) continue;
    auto [it, inserted] = table_.try_emplace(request.name);
    Entry& entry = it->second;
    if (inserted) {
      entry.submitted.assign(static_cast<std::size_t>(options_.size), false);
      entry.first_seen = now;
      entry.last_warned = now;
      entry.last_arrival = now;
      if (!first_op_) first_op_ = now;
    }
    entry.prev_arrival = entry.last_arrival;
    entry.last_arrival = now;
    if (entry.has(rank)) {
      // The whole name fails: the ranks that submitted it once get the error too.
      fail_name(request.name, entry.by_rank, request, rank,
                fmt::format("tensor '{}' was submitted twice by rank {} before it ran",
                            request.name, rank),
                false);
      table_.erase(it);
      continue;
    }
    if (!shut_down_.empty()) {
      std::vector<int> gone;
      for (int r : shut_down_) gone.push_back(shown(r));
      fail_name(request.name, entry.by_rank, request, rank,
                fmt::format("tensor '{}' cannot run: rank(s) {} already shut down", request.name,
                            ranks_text(gone)),
                true);
      table_.erase(it);
      continue;
    }
    if (!joined_.empty() && request.kind != OpKind::kAllreduce && request.kind != OpKind::kJoin) {
      fail_name(request.name, entry.by_rank, request, rank, joined_error(request), false);
      table_.erase(it);
      continue;
    }
    // A member's name goes to its group once (the first rank's request), or again where another
    // rank put it in another group (a mismatch, which fails both).
    if (request.group != 0) {
      const bool first = inserted || entry.by_rank.empty();
      note_member(it->first, request, rank,
                  first                                                 ? NameIs::kNew
                  : entry.by_rank.front().second.group != request.group ? NameIs::kMaybe
                                                                        : NameIs::kKnown);
    }
    const bool join = request.kind == OpKind::kJoin;
    entry.submitted[static_cast<std::size_t>(rank)] = true;
    entry.by_rank.emplace_back(rank, std::move(request));
    if (join) {
      last_joined_ = rank;
      joined_.insert(rank);
    }
    if (static_cast<int>(entry.by_rank.size()) == options_.size ||
        (!join && complete_with_joined(entry))) {
      if (static_cast<int>(entry.by_rank.size()) == options_.size && options_.size > 1) {
        note_hold(rank, entry.prev_arrival, now);
      }
      complete(it->first, entry);
      table_.erase(it);
    }
    if (join && !joined_.empty()) rank_joined();
  }
  for (const std::uint64_t id : failed_seen) {
    auto f = failed_groups_.find(id);
    if (f == failed_groups_.end()) continue;
    f->second.seen[static_cast<std::size_t>(rank)] = true;
    if (std::all_of(f->second.seen.begin(), f->second.seen.end(), [](bool b) { return b; })) {
      failed_groups_.erase(f);
    }
  }
  if (list.shutdown) {
    shut_down_.insert(rank);
    fail_waiting_for(
        rank, fmt::format("rank {} called hvd::shutdown(){} before submitting it", shown(rank),
                          options_.set_label.empty() ? "" : " or removed the process set"));
  }
  fuse_ready();
  if (options_.on_holds) report_holds(now, everyone_shut_down());
}

void Controller::add_unanimous(RequestList list, Clock::time_point now) {
  const bool join = std::any_of(list.requests.begin(), list.requests.end(),
                                [](const Request& q) { return q.kind == OpKind::kJoin; });
  if (!idle() || !shut_down_.empty() || list.shutdown || join || !joined_.empty()) {
    for (int r = 0; r < options_.size; ++r)
      add(r, r + 1 < options_.size ? list : std::move(list), now);
    return;
  }
  for (Request& request : list.requests) {
    // As complete() would: the lowest rank's request, checked against every rank's (its own).
    std::string error = mismatch(request.name, 0, request, 0, request);
    if (request.group != 0) note_member(request.name, request, kEveryRank, NameIs::kNew);
    decided(std::move(request), std::move(error));
  }
  fuse_ready();
}

void Controller::rank_left(int rank) {
  if (shut_down_.count(rank) != 0) return;  // a normal goodbye
  if (fatal_.empty()) {
    fatal_ = fmt::format(
        "rank {} left the job without calling hvd::shutdown() (its control "
        "connection{} closed): it probably crashed or was killed",
        shown(rank), where());
    fatal_status_ = HVD_ERR_PEER_LOST;
  }
  shut_down_.insert(rank);
}

std::vector<std::string> Controller::sorted_names() const {
  std::vector<std::string> names;
  names.reserve(table_.size());
  for (const auto& [name, entry] : table_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void Controller::fail_waiting_for(int rank, const std::string& why) {
  for (const std::string& name : sorted_names()) {
    auto it = table_.find(name);
    if (it->second.has(rank)) continue;
    const Request& any = it->second.by_rank.front().second;
    fail_name(name, it->second.by_rank, any, it->second.by_rank.front().first,
              fmt::format("tensor '{}': {}", name, why), true);
    table_.erase(it);
  }
}

void Controller::complete(const std::string& name, Entry& entry) {
  std::sort(entry.by_rank.begin(), entry.by_rank.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string error = validate(name, entry);
  const Request& lowest = entry.by_rank.front().second;
  if (lowest.kind == OpKind::kJoin) {
    join_results_[name] = shown(last_joined_);
    joined_.clear();
  } else if (static_cast<int>(entry.by_rank.size()) < options_.size && error.empty()) {
    joined_requests_[name] = lowest;  // the joined ranks run it with zeros
  }
  if (!error.empty() && fail_groups(entry.by_rank, error, false, true)) return;
  decided(std::move(entry.by_rank.front().second), std::move(error));
}

bool Controller::complete_with_joined(const Entry& entry) const {
  if (joined_.empty()) return false;
  for (int r = 0; r < options_.size; ++r) {
    if (!entry.has(r) && joined_.count(r) == 0) return false;
  }
  return true;
}

void Controller::rank_joined() {
  for (const std::string& name : sorted_names()) {
    auto it = table_.find(name);
    Entry& entry = it->second;
    const Request& any = entry.by_rank.front().second;
    if (any.kind == OpKind::kJoin) continue;
    if (any.kind != OpKind::kAllreduce) {
      fail_name(name, entry.by_rank, any, entry.by_rank.front().first, joined_error(any), false);
      table_.erase(it);
    } else if (complete_with_joined(entry)) {
      complete(name, entry);
      table_.erase(it);
    }
  }
}

std::string Controller::joined_error(const Request& request) const {
  std::vector<int> ranks;
  for (int r : joined_) ranks.push_back(shown(r));
  return fmt::format(
      "{} '{}' cannot run: rank(s) {} called hvd::join(){}, and while a rank has joined only "
      "allreduces run (the joined ranks add zeros)",
      op_kind_name(request.kind), request.name, ranks_text(ranks), where());
}

std::optional<Request> Controller::take_joined_request(const std::string& name) {
  if (joined_requests_.empty()) return std::nullopt;
  auto it = joined_requests_.find(name);
  if (it == joined_requests_.end()) return std::nullopt;
  Request q = std::move(it->second);
  joined_requests_.erase(it);
  return q;
}

std::optional<int> Controller::take_join_result(const std::string& name) {
  auto it = join_results_.find(name);
  if (it == join_results_.end()) return std::nullopt;
  const int last = it->second;
  join_results_.erase(it);
  return last;
}

std::string Controller::validate(const std::string& name, const Entry& entry) const {
  const auto& [first_rank, a] = entry.by_rank.front();
  for (const auto& [rank, b] : entry.by_rank) {
    if (std::string error = mismatch(name, first_rank, a, rank, b); !error.empty()) return error;
  }
  return {};
}

std::string Controller::mismatch(const std::string& name, int rank_a, const Request& a, int rank_b,
                                 const Request& b) {
  auto differs = [&](const char* field, const std::string& va, const std::string& vb) {
    return fmt::format("tensor '{}': {} mismatch: rank {} submitted {}, rank {} submitted {}", name,
                       field, rank_a, va, rank_b, vb);
  };
  if (a.kind != b.kind) return differs("operation", op_kind_name(a.kind), op_kind_name(b.kind));
  if (a.group != b.group || a.group_size != b.group_size) {
    return differs("group", group_text(a), group_text(b));
  }
  if (a.device.kind != b.device.kind) {
    return differs("device", device_text(a.device), device_text(b.device));
  }
  if (a.kind == OpKind::kBarrier) return {};
  if (a.dtype != b.dtype) return differs("data type", dtype_name(a.dtype), dtype_name(b.dtype));
  const bool first_dim_free = a.kind == OpKind::kAllgather || a.kind == OpKind::kAlltoall;
  const bool same_shape =
      first_dim_free ? a.shape.size() == b.shape.size() && !a.shape.empty() &&
                           std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1)
                     : a.shape == b.shape;
  if (!same_shape) {
    return differs(first_dim_free ? "shape (after the first dimension)" : "shape",
                   shape_text(a.shape), shape_text(b.shape));
  }
  if ((a.kind == OpKind::kAllreduce || a.kind == OpKind::kReducescatter) && a.op != b.op) {
    return differs("reduce op", op_name(a.op), op_name(b.op));
  }
  if (a.kind == OpKind::kBroadcast && a.root != b.root) {
    return differs("root rank", std::to_string(a.root), std::to_string(b.root));
  }
  const bool scaled = a.kind == OpKind::kAllreduce || a.kind == OpKind::kReducescatter;
  if (scaled && a.prescale != b.prescale) {
    return differs("prescale", fmt::format("{}", a.prescale), fmt::format("{}", b.prescale));
  }
  if (scaled && a.postscale != b.postscale) {
    return differs("postscale", fmt::format("{}", a.postscale), fmt::format("{}", b.postscale));
  }
  return {};
}

void fuse_responses(const std::vector<ReadyOp>& ready, std::size_t threshold,
                    std::vector<Response>& out) {
  // In readiness order, each op joins the first open response it is fusable with and fits in,
  // else opens one (the same grouping as pairing every op with every later one, in one pass
  // over the few open responses).
  struct Open {
    std::size_t response;  // index in out
    const Request* head;
    std::size_t bytes;
  };
  if (ready.size() == 1) {  // a synchronous call: nothing to fuse with
    const auto& [request, error] = ready.front();
    out.push_back(Response{request->kind, {request->name}, error == nullptr ? "" : *error});
    return;
  }
  std::vector<Open> open;
  std::vector<std::pair<std::uint64_t, std::size_t>> groups;  // group id, its response in out
  for (const auto& [request, error] : ready) {
    if (request->group != 0 && (error == nullptr || error->empty())) {
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == request->group; });
      if (group != groups.end()) {
        out[group->second].names.push_back(request->name);
      } else {
        out.push_back(Response{request->kind, {request->name}, {}});
        groups.emplace_back(request->group, out.size() - 1);
      }
      continue;
    }
    const std::size_t bytes = byte_size(*request);
    const bool can_fuse =
        (error == nullptr || error->empty()) && threshold > 0 && bytes <= threshold &&
        (request->kind == OpKind::kAllreduce || request->kind == OpKind::kBroadcast);
    if (can_fuse) {
      auto joined = std::find_if(open.begin(), open.end(), [&](const Open& o) {
        return fusable(*o.head, *request) && o.bytes + bytes <= threshold;
      });
      if (joined != open.end()) {
        out[joined->response].names.push_back(request->name);
        joined->bytes += bytes;
        continue;
      }
    }
    out.push_back(Response{request->kind, {request->name}, error == nullptr ? "" : *error});
    if (can_fuse) open.push_back({out.size() - 1, request, bytes});
  }
}

void Controller::note_member(const std::string& name, const Request& request, int rank,
                             NameIs known) {
  auto [it, inserted] = groups_.try_emplace(request.group);
  Group& group = it->second;
  if (inserted) {
    group.kind = request.kind;
    group.size = request.group_size;
    group.size_rank = rank;
    group.seen.assign(static_cast<std::size_t>(options_.size), false);
  }
  if (rank == kEveryRank) {
    group.seen.assign(group.seen.size(), true);
  } else if (rank >= 0) {
    group.seen[static_cast<std::size_t>(rank)] = true;
  }
  if (known == NameIs::kNew ||
      (known == NameIs::kMaybe &&
       std::find(group.names.begin(), group.names.end(), name) == group.names.end())) {
    group.names.push_back(name);
  }
  if (!group.error.empty()) return;
  const std::string_view base = group_base(group.names.front());
  if (request.group_size != group.size && rank >= 0 && group.size_rank >= 0) {
    group.error = fmt::format(
        "grouped {} '{}'{}: rank {} submitted {} tensors, rank {} submitted {}: every rank must "
        "pass the same tensors to a grouped call",
        op_kind_name(group.kind), base, where(), shown(group.size_rank), group.size, shown(rank),
        request.group_size);
  } else if (group.names.size() > group.size) {
    group.error = fmt::format(
        "grouped {} '{}'{}: the ranks submitted {} different tensors to this group of {} ({}): "
        "every rank must pass the same tensors to a grouped call",
        op_kind_name(group.kind), base, where(), group.names.size(), group.size,
        quoted(group.names));
  } else {
    return;
  }
  group.disagree = true;
  group.mismatch = true;
  touched_.push_back(request.group);
}

bool Controller::failed_member(const Request& request, int rank) {
  if (failed_names_.empty()) return false;
  auto it = failed_names_.find(request.name);
  if (it == failed_names_.end() || it->second.seen[static_cast<std::size_t>(rank)]) return false;
  out_.push_back({request.kind, {request.name}, it->second.error, false});
  it->second.seen[static_cast<std::size_t>(rank)] = true;
  if (std::all_of(it->second.seen.begin(), it->second.seen.end(), [](bool b) { return b; })) {
    failed_names_.erase(it);
  }
  return true;
}

bool Controller::failed_before(const Request& request, int rank) {
  if (failed_groups_.empty()) return false;
  auto it = failed_groups_.find(request.group);
  if (it == failed_groups_.end() || it->second.seen[static_cast<std::size_t>(rank)]) return false;
  out_.push_back({request.kind, {request.name}, it->second.error, it->second.departed});
  return true;
}

void Controller::decided(Request request, std::string error) {
  if (request.group == 0 || !error.empty()) {
    ready_.emplace_back(std::move(request), std::move(error));
    return;
  }
  const std::uint64_t id = request.group;
  groups_[id].decided.emplace_back(std::move(request), std::move(error));
  touched_.push_back(id);
}

bool Controller::fail_group(const Request& request, int rank, const std::string& error,
                            bool departed, bool mismatch) {
  if (request.group == 0) return false;
  note_member(request.name, request, rank, NameIs::kMaybe);
  Group& group = groups_[request.group];
  if (group.error.empty()) {
    group.error = error;
    group.departed = departed;
    group.mismatch = mismatch;
  }
  touched_.push_back(request.group);
  return true;
}

bool Controller::fail_groups(const std::vector<std::pair<int, Request>>& by_rank,
                             const std::string& error, bool departed, bool mismatch) {
  bool any = false;
  for (const auto& [rank, request] : by_rank) {
    any |= fail_group(request, rank, error, departed, mismatch);
  }
  return any;
}

void Controller::fail_name(const std::string& name,
                           const std::vector<std::pair<int, Request>>& by_rank,
                           const Request& request, int rank, const std::string& error,
                           bool departed) {
  bool grouped = fail_group(request, rank, error, departed);
  grouped |= fail_groups(by_rank, error, departed);
  if (!grouped) out_.push_back({request.kind, {name}, error, departed});
}

void Controller::settle_groups() {
  for (const std::uint64_t id : touched_) {
    auto it = groups_.find(id);
    if (it == groups_.end()) continue;  // settled already
    Group& group = it->second;
    if (!group.error.empty()) {
      std::string error = group.names.size() > 1 && !group.disagree
                              ? fmt::format("{}; a group runs as one unit, so all of it fails: {}",
                                            group.error, quoted(group.names))
                              : group.error;
      for (const std::string& name : group.names) {
        auto entry = table_.find(name);
        // After a mismatch of requests, a rank that has not submitted a member yet gets the same
        // error when it does (it submits the same call later), instead of waiting for ranks that
        // are done. (Ranks that disagree on the group's tensors: by the group, below.)
        if (group.mismatch && !group.disagree && entry != table_.end()) {
          failed_names_[name] = Failed{group.kind, error, false, entry->second.submitted};
        }
        if (entry != table_.end()) table_.erase(entry);
        joined_requests_.erase(name);
      }
      // Ranks that disagree before every rank submitted: the others get the same error when
      // they submit (a failure for another reason is each submitter's own: a departure, a join).
      if (group.mismatch &&
          !std::all_of(group.seen.begin(), group.seen.end(), [](bool b) { return b; })) {
        failed_groups_[id] = Failed{group.kind, error, group.departed, group.seen};
      }
      out_.push_back({group.kind, std::move(group.names), std::move(error), group.departed});
      groups_.erase(it);
    } else if (group.decided.size() >= group.size) {
      for (auto& member : group.decided) ready_.push_back(std::move(member));
      groups_.erase(it);
    }
  }
  touched_.clear();
}

void Controller::fuse_ready() {
  settle_groups();
  std::vector<ReadyOp> ready;
  ready.reserve(ready_.size());
  for (const auto& [request, error] : ready_) ready.push_back({&request, &error});
  fuse_responses(ready, options_.fusion_threshold, out_);
  ready_.clear();
}

ResponseList Controller::take() {
  ResponseList list;
  list.responses = std::move(out_);
  out_.clear();
  if (!fatal_.empty() && !fatal_sent_) {
    list.fatal = fatal_;
    list.fatal_status = fatal_status_;
    fatal_sent_ = true;
  }
  return list;
}

}  // namespace hvd::runtime
