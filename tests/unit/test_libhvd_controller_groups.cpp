// Grouped ops in libhvd's coordinator (allreduce/engine/controller.h, "groups"): a group is
// all-or-nothing: held until every member is ready on every rank, then one response of its own
// whatever the fusion threshold; a mismatch, a departure or a join fails all of it on every rank.

#include <algorithm>

#include "tests/unit/libhvd_control_helpers.h"

using hvd::runtime::fuse_responses;
using hvd::runtime::group_base;
using hvd::runtime::group_id;
using hvd::runtime::group_member_name;
using hvd::runtime::is_automatic_name;
using hvd::runtime::ReadyOp;

namespace {

// One group of `kind` over `names` (as Runtime::submit_group makes it), in this order, named
// after its first member ("g" for "g_1of3") unless `base` says otherwise.
std::vector<Request> group_of(const Names& names, OpKind kind = OpKind::kAllreduce,
                              std::vector<std::int64_t> shape = {4}, std::string base = {}) {
  std::vector<Request> out;
  if (base.empty() && !names.empty()) base = std::string(group_base(names.front()));
  const std::uint64_t id = group_id(kind, base);
  for (const std::string& n : names) {
    Request r = op(kind, n, shape);
    r.group = id;
    r.group_size = static_cast<std::uint32_t>(names.size());
    out.push_back(std::move(r));
  }
  return out;
}

RequestList group_list(const Names& names, OpKind kind = OpKind::kAllreduce) {
  return list_of(group_of(names, kind));
}

std::vector<Request> concat(std::vector<Request> a, const std::vector<Request>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Names sorted(Names names) {
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("groups: a group waits for every member on every rank, then runs as one response",
          "[libhvd]") {
  Controller c = controller(3, 0);  // fusion off: without the group, three responses
  const Names g{"g_1of3", "g_2of3", "g_3of3"};
  c.add(0, list_of(concat(group_of(g), {allreduce("x")})), at(0));
  c.add(1, list_of(concat(group_of(g), {allreduce("x")})), at(0));
  CHECK(c.take().responses.empty());
  // Rank 2 brings two members first (a message split the group): they are ready but held.
  std::vector<Request> members = group_of(g);
  c.add(2, list_of({members[0], members[2], allreduce("x")}), at(1));
  CHECK(names_of(c.take()) == std::vector<Names>{{"x"}});
  CHECK_FALSE(c.idle());
  c.add(2, list_of({members[1]}), at(2));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(sorted(out.responses[0].names) == g);
  CHECK(out.responses[0].error.empty());
  CHECK(out.responses[0].kind == OpKind::kAllreduce);
  CHECK(c.idle());
}

TEST_CASE("groups: one response whatever the fusion threshold, never shared with other tensors",
          "[libhvd]") {
  // 16-byte tensors against a 20-byte threshold: fusion would pair nothing, the group takes all.
  Controller c = controller(2, 20);
  const Names g{"big_1of3", "big_2of3", "big_3of3"};
  const Names h{"h_1of2", "h_2of2"};
  for (int r = 0; r < 2; ++r) {
    c.add(r,
          list_of(concat(concat({allreduce("before")}, group_of(g)),
                         concat(group_of(h), {allreduce("after")}))),
          at(0));
  }
  // A group comes out once the list that completes it has been read (after that list's other
  // tensors): the same order on every rank.
  CHECK(names_of(c.take()) == std::vector<Names>{{"before"}, {"after"}, g, h});

  // Every rank bringing the same list at once (add_unanimous): the same.
  Controller u = controller(2, 0);
  u.add_unanimous(list_of(concat(group_of(g), {allreduce("x"), allreduce("y")})), at(0));
  CHECK(names_of(u.take()) == std::vector<Names>{{"x"}, {"y"}, g});
  CHECK(u.idle());

  // Grouped allgathers and reducescatters, which are never fused otherwise.
  Controller k = controller(2);
  for (int r = 0; r < 2; ++r) {
    k.add(r,
          list_of(concat(group_of({"a_1of2", "a_2of2"}, OpKind::kAllgather),
                         group_of({"s_1of2", "s_2of2"}, OpKind::kReducescatter))),
          at(0));
  }
  const ResponseList out = k.take();
  REQUIRE(out.responses.size() == 2);
  CHECK(out.responses[0].kind == OpKind::kAllgather);
  CHECK(out.responses[0].names == Names{"a_1of2", "a_2of2"});
  CHECK(out.responses[1].kind == OpKind::kReducescatter);
  CHECK(out.responses[1].names == Names{"s_1of2", "s_2of2"});
}

TEST_CASE("groups: fuse_responses keeps a group whole and apart", "[libhvd]") {
  std::vector<Request> g = group_of({"m_1of2", "m_2of2"}, OpKind::kAllreduce, {1000});
  const Request x = allreduce("x");
  const std::vector<ReadyOp> ready{{&x, nullptr}, {&g[0], nullptr}, {&g[1], nullptr}};
  std::vector<Response> out;
  fuse_responses(ready, 64, out);  // 4000-byte members over a 64-byte threshold
  REQUIRE(out.size() == 2);
  CHECK(out[0].names == Names{"x"});
  CHECK(out[1].names == Names{"m_1of2", "m_2of2"});
}

TEST_CASE("groups: a tensor alone on one rank and grouped on another fails the whole group",
          "[libhvd]") {
  // (Not by the group's count or names: rank 1 has no group. When every rank has submitted the
  // tensor, the requests differ.)
  Controller c = controller(2);
  const Names g{"p_1of2", "p_2of2"};
  c.add(0, group_list(g), at(0));
  c.add(1, list_of({allreduce("p_1of2"), allreduce("p_2of2")}), at(0));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() >= 1);
  Names failed;
  for (const Response& r : out.responses) {
    CHECK_FALSE(r.error.empty());
    CHECK_FALSE(r.departed);
    failed.insert(failed.end(), r.names.begin(), r.names.end());
  }
  CHECK(std::count(failed.begin(), failed.end(), "p_1of2") >= 1);
  CHECK(std::count(failed.begin(), failed.end(), "p_2of2") >= 1);
  const std::string& e = out.responses[0].error;
  CHECK_THAT(e, Catch::Matchers::ContainsSubstring(
                    "tensor 'p_1of2': group mismatch: rank 0 submitted it in a "
                    "group of 2 tensors"));
  CHECK_THAT(e, Catch::Matchers::ContainsSubstring("rank 1 submitted it alone (in no group)"));
  CHECK_THAT(e, Catch::Matchers::ContainsSubstring(
                    "a group runs as one unit, so all of it fails: 'p_1of2', "
                    "'p_2of2'"));
  CHECK(c.idle());  // nothing left waiting: no hang
}

TEST_CASE("groups: after a mismatch, a member submitted later fails with the same error",
          "[libhvd]") {
  // Rank 1 submits the members alone, one message each: the first one completes (a mismatch) and
  // fails the group before the second arrives, which then must not wait for rank 0.
  Controller c = controller(2);
  c.add(0, group_list({"p_1of2", "p_2of2"}), at(0));
  c.add(1, list_of({allreduce("p_1of2")}), at(0));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  const std::string error = out.responses[0].error;
  CHECK_THAT(error, Catch::Matchers::ContainsSubstring("group mismatch"));
  c.add(1, list_of({allreduce("p_2of2")}), at(1));
  const ResponseList late = c.take();
  REQUIRE(late.responses.size() == 1);
  CHECK(late.responses[0].names == Names{"p_2of2"});
  CHECK(late.responses[0].error == error);
  CHECK(c.idle());
  // The name is free again.
  c.add(0, list_of({allreduce("p_2of2")}), at(2));
  c.add(1, list_of({allreduce("p_2of2")}), at(2));
  const ResponseList again = c.take();
  REQUIRE(again.responses.size() == 1);
  CHECK(again.responses[0].error.empty());
}

TEST_CASE("groups: ranks passing other tensors or another count to one group fail it at once",
          "[libhvd]") {
  SECTION("other members") {
    Controller c = controller(2);
    c.add(0, group_list({"x_1of2", "x_2of2"}), at(0));
    c.add(1, list_of(group_of({"x_1of2", "y"}, OpKind::kAllreduce, {4}, "x")), at(0));
    const ResponseList out = c.take();
    REQUIRE(out.responses.size() == 1);
    CHECK(sorted(out.responses[0].names) == Names{"x_1of2", "x_2of2", "y"});
    CHECK(out.responses[0].error ==
          "grouped allreduce 'x': the ranks submitted 3 different tensors to this group of 2 "
          "('x_1of2', 'x_2of2', 'y'): every rank must pass the same tensors to a grouped call");
    CHECK(c.idle());
  }
  SECTION("another count: no member name in common") {
    Controller c = controller(2);
    c.add(0, group_list({"x_1of2", "x_2of2"}), at(0));
    c.add(1, group_list({"x_1of3", "x_2of3", "x_3of3"}), at(0));
    const ResponseList out = c.take();
    REQUIRE(out.responses.size() == 1);
    CHECK_THAT(
        out.responses[0].error,
        Catch::Matchers::StartsWith("grouped allreduce 'x': rank 0 submitted 2 tensors, rank 1 "
                                    "submitted 3: every rank must pass the same tensors"));
    CHECK(out.responses[0].names.size() == 5);
    CHECK(c.idle());
  }
  SECTION("a third rank that submits later gets the same error, then the name is free again") {
    Controller c = controller(3);
    c.add(0, group_list({"x_1of2", "x_2of2"}), at(0));
    c.add(1, group_list({"x_1of3", "x_2of3", "x_3of3"}), at(0));
    const std::string error = c.take().responses.at(0).error;
    c.add(2, group_list({"x_1of2", "x_2of2"}), at(1));
    const ResponseList late = c.take();
    REQUIRE(late.responses.size() == 2);
    for (const Response& r : late.responses) CHECK(r.error == error);
    CHECK(c.idle());
    for (int r = 0; r < 3; ++r) c.add(r, group_list({"x_1of2", "x_2of2"}), at(2));
    const ResponseList again = c.take();
    REQUIRE(again.responses.size() == 1);
    CHECK(again.responses[0].error.empty());
  }
}

TEST_CASE("groups: one member's mismatch fails every member, ready ones included", "[libhvd]") {
  Controller c = controller(2);
  const Names g{"w_1of2", "w_2of2"};
  c.add(0, group_list(g), at(0));
  std::vector<Request> other = group_of(g);
  other[1].dtype = DataType::kFloat64;  // w_1of2 is fine, w_2of2 differs
  c.add(1, list_of(other), at(0));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(sorted(out.responses[0].names) == g);
  CHECK_THAT(
      out.responses[0].error,
      Catch::Matchers::StartsWith("tensor 'w_2of2': data type mismatch: rank 0 submitted float32, "
                                  "rank 1 submitted float64"));
  CHECK(c.idle());
}

TEST_CASE("groups: a departed rank fails the members already ready", "[libhvd]") {
  Controller c = controller(2);
  const Names g{"d_1of2", "d_2of2"};
  c.add(0, group_list(g), at(0));
  c.add(1, list_of({group_of(g)[0]}), at(1));  // d_1of2 ready on both, held for d_2of2
  CHECK(c.take().responses.empty());
  c.add(1, list_of({}, true), at(2));  // rank 1 shuts down
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(sorted(out.responses[0].names) == g);
  CHECK(out.responses[0].departed);
  CHECK_THAT(out.responses[0].error,
             Catch::Matchers::ContainsSubstring("rank 1 called hvd::shutdown()"));
  CHECK(c.idle());
  // A group submitted after the departure fails at once, whole.
  c.add(0, group_list({"late_1of2", "late_2of2"}), at(3));
  const ResponseList late = c.take();
  REQUIRE(late.responses.size() == 1);
  CHECK(sorted(late.responses[0].names) == Names{"late_1of2", "late_2of2"});
  CHECK(late.responses[0].departed);
}

TEST_CASE("groups: a stalled group names only its missing members", "[libhvd]") {
  Controller c(ControllerOptions{.size = 2, .stall_warning = std::chrono::seconds(1)});
  const Names g{"s_1of2", "s_2of2"};
  c.add(0, group_list(g), at(0));
  c.add(1, list_of({group_of(g)[0]}), at(0));
  const std::vector<std::string> warnings = c.check_stalls(at(2));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0],
             Catch::Matchers::ContainsSubstring("rank 1 has not submitted tensor 's_2of2'"));
}

TEST_CASE("groups: with a joined rank a grouped allreduce runs whole, other grouped ops fail",
          "[libhvd]") {
  Controller c = controller(2, 0);
  c.add(1, list_of({op(OpKind::kJoin, "join")}), at(0));
  const Names g{"j_1of2", "j_2of2"};
  c.add(0, group_list(g), at(1));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(out.responses[0].names == g);
  CHECK(out.responses[0].error.empty());
  CHECK(c.take_joined_request("j_1of2").has_value());  // rank 1 adds zeros for both
  CHECK(c.take_joined_request("j_2of2").has_value());

  c.add(0, group_list({"ag_1of2", "ag_2of2"}, OpKind::kAllgather), at(2));
  const ResponseList failed = c.take();
  REQUIRE(failed.responses.size() == 1);
  CHECK(sorted(failed.responses[0].names) == Names{"ag_1of2", "ag_2of2"});
  CHECK_THAT(failed.responses[0].error, Catch::Matchers::ContainsSubstring("called hvd::join()"));
}

TEST_CASE("groups: ids and member names", "[libhvd]") {
  CHECK(group_id(OpKind::kAllreduce, "g") == group_id(OpKind::kAllreduce, "g"));
  CHECK(group_id(OpKind::kAllreduce, "g") != group_id(OpKind::kAllreduce, "h"));
  CHECK(group_id(OpKind::kAllreduce, "g") != group_id(OpKind::kAllgather, "g"));
  CHECK(group_id(OpKind::kAllreduce, "") != 0);
  CHECK(group_member_name("grads", 1, 4) == "grads_2of4");
  CHECK(group_base("grads_2of4") == "grads");
  CHECK(group_base("my_grads_2of4") == "my_grads");
  // A synchronous group's members are automatic names: the response cache never keeps them.
  CHECK(is_automatic_name(group_member_name("hvd.allreduce.7", 0, 3)));
  CHECK(is_automatic_name("hvd.allreduce.7"));
  CHECK_FALSE(is_automatic_name("hvd.allreduce.7_1of"));
  CHECK_FALSE(is_automatic_name("hvd.allreduce.7_of3"));
  CHECK_FALSE(is_automatic_name("hvd.allreduce.7_1of3x"));
  CHECK_FALSE(is_automatic_name("grads_1of3"));
}
