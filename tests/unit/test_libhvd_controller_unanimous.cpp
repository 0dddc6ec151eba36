// libhvd's coordinator's shortcut for a list every rank brought (Controller::add_unanimous,
// allreduce/engine/controller.h): the same decisions as add() for every rank, and its fall-back
// when something is pending or a rank is gone. The rest of the coordinator's tests are in
// test_libhvd_controller.cpp.
#include <algorithm>
#include <functional>

#include "tests/unit/libhvd_control_helpers.h"

// ---- every rank brought the same list (add_unanimous) ----

TEST_CASE(
    "controller: a list every rank brought decides as add() for every rank would, and "
    "falls back to it when something is pending or a rank is gone",
    "[libhvd]") {
  // Mixed kinds, fusable and not, an op the validation refuses even when alone (an allgather of
  // a scalar), a name whose first sight is in this list.
  std::vector<Request> requests = {allreduce("a"),
                                   allreduce("b", {2, 3}),
                                   broadcast("c", 1),
                                   broadcast("d", 1),
                                   allreduce("e", {4}, DataType::kFloat64),
                                   op(OpKind::kAllgather, "f", {}),
                                   op(OpKind::kBarrier, "g"),
                                   allreduce("h", {1 << 20})};
  for (std::size_t threshold : {std::size_t{0}, std::size_t{64}, std::size_t{64u << 20}}) {
    for (int size : {1, 2, 3}) {
      INFO("threshold " << threshold << ", " << size << " ranks");
      Controller every = controller(size, threshold);
      for (int r = 0; r < size; ++r) every.add(r, list_of(requests), at(1));
      Controller once = controller(size, threshold);
      once.add_unanimous(list_of(requests), at(1));
      const ResponseList expected = every.take();
      CHECK(once.take() == expected);
      CHECK(once.idle());
      const auto f = std::find_if(expected.responses.begin(), expected.responses.end(),
                                  [](const Response& r) { return r.names == Names{"f"}; });
      REQUIRE(f != expected.responses.end());
      CHECK_THAT(f->error, Catch::Matchers::ContainsSubstring("tensor 'f': shape"));
    }
  }

  // Something pending (rank 0 brought "x" before): the same as add() for every rank, and "x"
  // still waits for rank 1 afterwards.
  auto both = [](const std::function<void(Controller&)>& feed) {
    Controller every = controller(2), once = controller(2);
    every.add(0, names_list({"x"}), at(0));
    once.add(0, names_list({"x"}), at(0));
    for (int r = 0; r < 2; ++r) every.add(r, names_list({"y", "w"}), at(1));
    feed(once);
    return std::pair{every.take(), once.take()};
  };
  const auto [expected, got] = both([](Controller& c) {
    c.add_unanimous(names_list({"y", "w"}), at(1));
  });
  CHECK(names_of(got) == std::vector<Names>{{"y", "w"}});
  CHECK(got == expected);

  // A rank gone: the same errors as add() for every rank gives.
  Controller every = controller(2), once = controller(2);
  for (Controller* c : {&every, &once}) {
    c->add(1, list_of({}, true), at(0));
    c->take();
  }
  for (int r = 0; r < 2; ++r) every.add(r, names_list({"z"}), at(1));
  once.add_unanimous(names_list({"z"}), at(1));
  const ResponseList gone = once.take();
  CHECK(gone == every.take());
  REQUIRE_FALSE(gone.responses.empty());
  CHECK_THAT(gone.responses[0].error, Catch::Matchers::ContainsSubstring("already shut down"));
}

TEST_CASE("controller: a process set's stalls and shutdowns name the set and global ranks",
          "[libhvd]") {
  Controller c(ControllerOptions{.size = 2,
                                 .stall_warning = std::chrono::seconds(1),
                                 .stall_shutdown = std::chrono::seconds(3),
                                 .set_label = "process set 1 (ranks 0, 2)",
                                 .global_ranks = {0, 2}});
  c.add(0, names_list({"A"}), at(0));
  const std::vector<std::string> warnings = c.check_stalls(at(1.5));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::StartsWith("stall in process set 1 (ranks 0, 2): rank "
                                                      "2 has not submitted tensor 'A'"));
  c.check_stalls(at(3));
  CHECK(c.fatal() ==
        "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (3 s): tensor 'A' in process "
        "set 1 (ranks 0, 2) was never submitted by rank(s) 2");
}

TEST_CASE("controller: a joined rank completes allreduces, fails the rest, names the last to join",
          "[libhvd]") {
  Controller c = controller(3);
  c.add(1, list_of({op(OpKind::kJoin, "hvd.join.0", {0})}), at(0));
  c.add(0, list_of({allreduce("A"), op(OpKind::kAllgather, "G")}), at(0));
  ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);  // the allgather, at once; A waits for rank 2
  CHECK(out.responses[0].names == Names{"G"});
  CHECK_THAT(out.responses[0].error, Catch::Matchers::ContainsSubstring(
                                         "rank(s) 1 called hvd::join(), and while a rank has "
                                         "joined only allreduces run"));
  c.add(2, list_of({allreduce("A")}), at(0));
  CHECK(names_of(c.take()) == std::vector<Names>{{"A"}});
  const std::optional<Request> zeros = c.take_joined_request("A");
  REQUIRE(zeros.has_value());  // rank 1 runs it with zeros of this shape
  CHECK(zeros->shape == std::vector<std::int64_t>{4});
  CHECK_FALSE(c.take_joined_request("A").has_value());
  c.add(2, list_of({op(OpKind::kJoin, "hvd.join.0", {0})}), at(1));
  CHECK(c.take().responses.empty());
  c.add(0, list_of({op(OpKind::kJoin, "hvd.join.0", {0})}), at(2));
  CHECK(names_of(c.take()) == std::vector<Names>{{"hvd.join.0"}});
  CHECK(c.take_join_result("hvd.join.0") == 0);  // rank 0 joined last
  // After the round, an allreduce needs every rank again.
  c.add(0, list_of({allreduce("B")}), at(3));
  CHECK(c.take().responses.empty());
}
