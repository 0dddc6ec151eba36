// libhvd's coordinator as pure logic (allreduce/engine/controller.h), driven with hand-made
// requests and a fake clock: readiness order, validation messages, fusion, duplicates, shutdowns,
// departures, stalls. The codec's tests are in test_libhvd_messages.cpp.

#include "tests/unit/libhvd_control_helpers.h"

// ---- readiness ----

TEST_CASE("controller: an op is ready when the last rank submits it, in completion order",
          "[libhvd]") {
  Controller c = controller(3, 0);
  c.add(0, names_list({"A", "B", "C"}), at(0));
  CHECK(c.take().responses.empty());
  c.add(1, names_list({"C", "B"}), at(1));
  CHECK(c.take().responses.empty());
  c.add(2, names_list({"B"}), at(2));
  CHECK(names_of(c.take()) == std::vector<Names>{{"B"}});
  c.add(2, names_list({"A", "C"}), at(3));  // A still lacks rank 1; C completes
  CHECK(names_of(c.take()) == std::vector<Names>{{"C"}});
  CHECK(c.take().responses.empty());
  c.add(1, names_list({"A"}), at(4));
  const ResponseList last = c.take();
  CHECK(names_of(last) == std::vector<Names>{{"A"}});
  CHECK(last.responses[0].error.empty());
  CHECK(last.responses[0].kind == OpKind::kAllreduce);
  CHECK(last.fatal.empty());

  // Several completions before one take(): they come out in completion order, once each.
  Controller d = controller(3, 0);
  d.add(2, names_list({"X", "Y", "Z"}), at(0));
  d.add(0, names_list({"Z", "Y", "X"}), at(0));
  d.add(1, names_list({"Y"}), at(1));
  d.add(1, names_list({"Z", "X"}), at(2));
  CHECK(names_of(d.take()) == std::vector<Names>{{"Y"}, {"Z"}, {"X"}});
  CHECK(d.take().responses.empty());
  CHECK_FALSE(d.next_stall_check().has_value());  // nothing pending
}

TEST_CASE("controller: a single rank's op is ready at once", "[libhvd]") {
  Controller c = controller(1, 0);
  c.add(0, names_list({"solo", "duo"}), at(0));
  CHECK(names_of(c.take()) == std::vector<Names>{{"solo"}, {"duo"}});
}

// ---- validation ----

TEST_CASE("controller: each mismatched field is named with both values and ranks", "[libhvd]") {
  const Request base = allreduce("T", {2, 3});
  auto with = [&](auto change) {
    Request r = base;
    change(r);
    return r;
  };
  const std::string t = "tensor 'T': ";
  CHECK(error_between(base, with([](Request& r) { r.kind = OpKind::kBroadcast; })) ==
        t + "operation mismatch: rank 0 submitted allreduce, rank 1 submitted broadcast");
  CHECK(error_between(base, with([](Request& r) { r.device = Device::cuda(2); })) ==
        t + "device mismatch: rank 0 submitted CPU, rank 1 submitted GPU (CUDA device 2)");
  CHECK(error_between(base, with([](Request& r) { r.dtype = DataType::kFloat16; })) ==
        t + "data type mismatch: rank 0 submitted float32, rank 1 submitted float16");
  CHECK(error_between(base, with([](Request& r) {
                        r.shape = {3, 2};
                      })) ==
        t + "shape mismatch: rank 0 submitted [2, 3], rank 1 submitted [3, 2]");
  CHECK(error_between(base, with([](Request& r) {
                        r.shape = {5, 3};
                      })) ==
        t + "shape mismatch: rank 0 submitted [2, 3], rank 1 submitted [5, 3]");
  CHECK(error_between(base, with([](Request& r) { r.op = ReduceOp::kMax; })) ==
        t + "reduce op mismatch: rank 0 submitted sum, rank 1 submitted max");
  CHECK(error_between(base, with([](Request& r) { r.prescale = 0.5; })) ==
        t + "prescale mismatch: rank 0 submitted 1, rank 1 submitted 0.5");
  CHECK(error_between(with([](Request& r) { r.postscale = 0.25; }), base) ==
        t + "postscale mismatch: rank 0 submitted 0.25, rank 1 submitted 1");

  Request b0 = broadcast("T", 0);
  CHECK(error_between(b0, broadcast("T", 1)) ==
        t + "root rank mismatch: rank 0 submitted 0, rank 1 submitted 1");
  b0.op = ReduceOp::kMin;  // a broadcast's op and scale factors are not compared
  b0.prescale = 2;
  CHECK(error_between(b0, broadcast("T", 0)).empty());

  Request rs = op(OpKind::kReducescatter, "T", {4, 2});
  Request rs_max = rs;
  rs_max.op = ReduceOp::kMax;
  CHECK(error_between(rs, rs_max) ==
        t + "reduce op mismatch: rank 0 submitted sum, rank 1 submitted max");
  Request rs_pre = rs, rs_post = rs;
  rs_pre.prescale = 0.5;
  rs_post.postscale = 4;
  CHECK(error_between(rs, rs_pre) ==
        t + "prescale mismatch: rank 0 submitted 1, rank 1 submitted 0.5");
  CHECK(error_between(rs_post, rs) ==
        t + "postscale mismatch: rank 0 submitted 4, rank 1 submitted 1");

  // A barrier compares only the operation and the device.
  CHECK(error_between(op(OpKind::kBarrier, "T", {1}),
                      op(OpKind::kBarrier, "T", {9, 9}, DataType::kInt8))
            .empty());
  CHECK(error_between(op(OpKind::kBarrier, "T"), op(OpKind::kAllreduce, "T")) ==
        t + "operation mismatch: rank 0 submitted barrier, rank 1 submitted allreduce");
}

TEST_CASE("controller: allgather and alltoall may differ only in the first dimension", "[libhvd]") {
  for (OpKind kind : {OpKind::kAllgather, OpKind::kAlltoall}) {
    INFO(hvd::runtime::op_kind_name(kind));
    CHECK(error_between(op(kind, "G", {4, 3}), op(kind, "G", {7, 3})).empty());
    CHECK(error_between(op(kind, "G", {4}), op(kind, "G", {1})).empty());
    CHECK(error_between(op(kind, "G", {4, 3}), op(kind, "G", {4, 2})) ==
          "tensor 'G': shape (after the first dimension) mismatch: rank 0 submitted [4, 3], "
          "rank 1 submitted [4, 2]");
    CHECK(error_between(op(kind, "G", {4, 3}), op(kind, "G", {4, 3, 1})) ==
          "tensor 'G': shape (after the first dimension) mismatch: rank 0 submitted [4, 3], "
          "rank 1 submitted [4, 3, 1]");
  }
}

TEST_CASE("controller: the message compares the lowest rank with the differing one", "[libhvd]") {
  // Rank 2 submits first and differs; rank 1 matches rank 0.
  Controller c = controller(3);
  c.add(2, list_of({allreduce("W", {8}, DataType::kFloat64)}), at(0));
  c.add(0, list_of({allreduce("W", {8})}), at(1));
  c.add(1, list_of({allreduce("W", {8})}), at(2));
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(out.responses[0].names == Names{"W"});
  CHECK(out.responses[0].error ==
        "tensor 'W': data type mismatch: rank 0 submitted float32, rank 2 submitted float64");
}

// ---- fusion ----

TEST_CASE("controller: small allreduces fuse in readiness order and split by kind", "[libhvd]") {
  SECTION("one dtype: one response, names in the last rank's order") {
    Controller c = controller(2);
    Names names;
    for (int i = 0; i < 20; ++i) names.push_back("t" + std::to_string(i));
    c.add(0, names_list(names), at(0));
    Names reversed(names.rbegin(), names.rend());
    c.add(1, names_list(reversed), at(0));
    const ResponseList out = c.take();
    REQUIRE(out.responses.size() == 1);
    CHECK(out.responses[0].names == reversed);
    CHECK(out.responses[0].kind == OpKind::kAllreduce);
    CHECK(out.responses[0].error.empty());
  }
  SECTION("dtype, op, prescale, postscale split groups; GPU tensors are never fused") {
    std::vector<Request> rs = {allreduce("f32a"),
                               allreduce("f16a", {4}, DataType::kFloat16),
                               allreduce("max"),
                               allreduce("pre"),
                               allreduce("post"),
                               allreduce("gpu0"),
                               allreduce("gpu1"),
                               allreduce("f32b"),
                               allreduce("f16b", {4}, DataType::kFloat16),
                               allreduce("gpu0b")};
    rs[2].op = ReduceOp::kMax;
    rs[3].prescale = 0.5;
    rs[4].postscale = 0.5;
    rs[5].device = Device::cuda(0);
    rs[6].device = Device::cuda(1);
    rs[9].device = Device::cuda(0);
    Controller c = controller(2);
    c.add(0, list_of(rs), at(0));
    c.add(1, list_of(rs), at(0));
    CHECK(names_of(c.take()) == std::vector<Names>{{"f32a", "f32b"},
                                                   {"f16a", "f16b"},
                                                   {"max"},
                                                   {"pre"},
                                                   {"post"},
                                                   {"gpu0"},
                                                   {"gpu1"},
                                                   {"gpu0b"}});
  }
  SECTION("other kinds never fuse with allreduces or each other") {
    std::vector<Request> rs = {allreduce("a1"), op(OpKind::kAllgather, "g1"),
                               op(OpKind::kAllgather, "g2"), broadcast("b1", 0), allreduce("a2")};
    Controller c = controller(2);
    c.add(0, list_of(rs), at(0));
    c.add(1, list_of(rs), at(0));
    CHECK(names_of(c.take()) == std::vector<Names>{{"a1", "a2"}, {"g1"}, {"g2"}, {"b1"}});
  }
  SECTION("ops ready in separate add() calls are not fused") {
    Controller c = controller(2);
    c.add(0, names_list({"p", "q"}), at(0));
    c.add(1, names_list({"p"}), at(0));
    c.add(1, names_list({"q"}), at(0));
    CHECK(names_of(c.take()) == std::vector<Names>{{"p"}, {"q"}});
  }
}

TEST_CASE("controller: the fusion threshold bounds the bytes of a fused response", "[libhvd]") {
  // Every float32 [4] tensor is 16 bytes.
  const Names four = {"a", "b", "c", "d"};
  auto run = [&](std::size_t threshold, const std::vector<Request>& rs) {
    Controller c = controller(2, threshold);
    c.add(0, list_of(rs), at(0));
    c.add(1, list_of(rs), at(0));
    return names_of(c.take());
  };
  const std::vector<Request> small = names_list(four).requests;
  CHECK(run(64, small) == std::vector<Names>{four});
  CHECK(run(48, small) == std::vector<Names>{{"a", "b", "c"}, {"d"}});
  CHECK(run(47, small) == std::vector<Names>{{"a", "b"}, {"c", "d"}});
  CHECK(run(16, small) == std::vector<Names>{{"a"}, {"b"}, {"c"}, {"d"}});
  CHECK(run(0, small) == std::vector<Names>{{"a"}, {"b"}, {"c"}, {"d"}});

  // A tensor over the threshold runs alone, wherever it is; the rest still fuse around it.
  const std::vector<Request> with_big = {allreduce("a"), allreduce("big", {16}), allreduce("c")};
  CHECK(run(32, with_big) == std::vector<Names>{{"a", "c"}, {"big"}});
  const std::vector<Request> big_first = {allreduce("big", {16}), allreduce("a"), allreduce("c")};
  CHECK(run(32, big_first) == std::vector<Names>{{"big"}, {"a", "c"}});
  // A tensor exactly at the threshold may head a group but nothing fits with it.
  CHECK(run(64, big_first) == std::vector<Names>{{"big"}, {"a", "c"}});
  // First fit: a tensor that does not fit is skipped, a later smaller one joins.
  const std::vector<Request> skip = {allreduce("a"), allreduce("mid", {10}), allreduce("c")};
  CHECK(run(40, skip) == std::vector<Names>{{"a", "c"}, {"mid"}});
  // Each op joins the earliest response it fits in: e no longer fits after a, c, d (40 bytes)
  // but fits with m (32 + 8).
  const std::vector<Request> earliest = {allreduce("a"), allreduce("m", {8}), allreduce("c"),
                                         allreduce("d", {2}), allreduce("e", {2})};
  CHECK(run(40, earliest) == std::vector<Names>{{"a", "c", "d"}, {"m", "e"}});
  // Sizes use the element size: 8 float64s are 64 bytes, 2 are 16.
  const std::vector<Request> f64 = {allreduce("d8", {8}, DataType::kFloat64),
                                    allreduce("d2", {2}, DataType::kFloat64)};
  CHECK(run(80, f64) == std::vector<Names>{{"d8", "d2"}});
  CHECK(run(79, f64) == std::vector<Names>{{"d8"}, {"d2"}});
}

TEST_CASE("controller: broadcasts fuse by root, error responses never fuse", "[libhvd]") {
  const std::vector<Request> bs = {broadcast("r0a", 0), broadcast("r1a", 1), broadcast("r0b", 0),
                                   broadcast("r1b", 1)};
  Controller c = controller(2);
  c.add(0, list_of(bs), at(0));
  c.add(1, list_of(bs), at(0));
  CHECK(names_of(c.take()) == std::vector<Names>{{"r0a", "r0b"}, {"r1a", "r1b"}});

  // e1 and e2 mismatch (rank 1 sends float16); they stay alone and keep their errors.
  Controller d = controller(2);
  d.add(0, names_list({"a", "e1", "e2", "b"}), at(0));
  d.add(1,
        list_of({allreduce("a"), allreduce("e1", {4}, DataType::kFloat16),
                 allreduce("e2", {4}, DataType::kFloat16), allreduce("b")}),
        at(0));
  const ResponseList out = d.take();
  REQUIRE(names_of(out) == std::vector<Names>{{"a", "b"}, {"e1"}, {"e2"}});
  CHECK(out.responses[0].error.empty());
  CHECK_THAT(out.responses[1].error, Catch::Matchers::StartsWith("tensor 'e1': data type"));
  CHECK_THAT(out.responses[2].error, Catch::Matchers::StartsWith("tensor 'e2': data type"));
}

// ---- duplicates, shutdown, departures ----

TEST_CASE("controller: a rank submitting a name twice gets an error response", "[libhvd]") {
  const std::string expected = "tensor 'A' was submitted twice by rank 1 before it ran";
  SECTION("in two messages") {
    Controller c = controller(2);
    c.add(1, names_list({"A"}), at(0));
    CHECK(c.take().responses.empty());
    c.add(1, names_list({"A"}), at(1));
    const ResponseList out = c.take();
    REQUIRE(out.responses.size() == 1);
    CHECK(out.responses[0].names == Names{"A"});
    CHECK(out.responses[0].kind == OpKind::kAllreduce);
    CHECK(out.responses[0].error == expected);
    CHECK_FALSE(out.responses[0].departed);  // a caller's mistake: HVD_ERR_INVALID_ARGUMENT
  }
  SECTION("in one message") {
    Controller c = controller(3);
    c.add(1, list_of({broadcast("A", 0), broadcast("A", 0)}), at(0));
    const ResponseList out = c.take();
    REQUIRE(out.responses.size() == 1);
    CHECK(out.responses[0].names == Names{"A"});
    CHECK(out.responses[0].kind == OpKind::kBroadcast);
    CHECK(out.responses[0].error == expected);
  }
  SECTION("the name fails for good: the last rank's copy does not run it afterwards") {
    Controller c = controller(3);
    c.add(0, names_list({"A"}), at(0));
    c.add(1, names_list({"A"}), at(0));
    c.add(1, names_list({"A"}), at(0));
    CHECK(c.take().responses.size() == 1);  // the error
    c.add(2, names_list({"A"}), at(1));
    CHECK(c.take().responses.empty());  // a fresh entry waiting for ranks 0 and 1 again
  }
}

TEST_CASE("controller: a shutdown fails what still needs that rank", "[libhvd]") {
  Controller c = controller(3);
  c.add(0, names_list({"A", "C"}), at(0));
  c.add(1, list_of({op(OpKind::kAllgather, "A"), allreduce("C")}), at(0));
  c.add(2, names_list({"C"}), at(0));  // C completes before the shutdown
  CHECK(names_of(c.take()) == std::vector<Names>{{"C"}});
  c.add(0, names_list({"D"}), at(1));
  c.add(2, list_of({allreduce("D")}, true), at(1));  // D still lacks rank 1, but has rank 2
  const ResponseList out = c.take();
  REQUIRE(out.responses.size() == 1);
  CHECK(out.responses[0].names == Names{"A"});
  CHECK(out.responses[0].kind == OpKind::kAllreduce);  // rank 0's op kind
  CHECK(out.responses[0].error == "tensor 'A': rank 2 called hvd::shutdown() before submitting it");
  CHECK(out.responses[0].departed);  // its handles fail with HVD_ERR_PEER_LOST
  CHECK(out.fatal.empty());
  CHECK_FALSE(c.everyone_shut_down());

  // Anything submitted after a shutdown fails at once, the pending D included.
  c.add(0, list_of({broadcast("B", 0)}), at(2));
  const ResponseList later = c.take();
  REQUIRE(later.responses.size() == 1);
  CHECK(later.responses[0].names == Names{"B"});
  CHECK(later.responses[0].kind == OpKind::kBroadcast);
  CHECK(later.responses[0].error == "tensor 'B' cannot run: rank(s) 2 already shut down");
  CHECK(later.responses[0].departed);
  c.add(1, names_list({"D"}), at(2));
  const ResponseList d = c.take();
  REQUIRE(d.responses.size() == 1);
  CHECK(d.responses[0].names == Names{"D"});
  CHECK(d.responses[0].error == "tensor 'D' cannot run: rank(s) 2 already shut down");

  c.add(0, list_of({}, true), at(3));
  CHECK_FALSE(c.everyone_shut_down());
  c.add(1, list_of({}, true), at(3));
  CHECK(c.everyone_shut_down());
  CHECK(c.take().fatal.empty());
}

TEST_CASE("controller: a shutdown message's own requests count before the shutdown", "[libhvd]") {
  Controller c = controller(2);
  c.add(0, names_list({"A"}), at(0));
  c.add(1, list_of({allreduce("A")}, true), at(0));
  const ResponseList out = c.take();
  REQUIRE(names_of(out) == std::vector<Names>{{"A"}});
  CHECK(out.responses[0].error.empty());
  CHECK_FALSE(c.everyone_shut_down());
}

TEST_CASE("controller: a rank that leaves without a shutdown is fatal, once", "[libhvd]") {
  Controller c = controller(3);
  c.add(0, names_list({"A"}), at(0));
  c.rank_left(1);
  CHECK_THAT(c.fatal(), Catch::Matchers::ContainsSubstring("rank 1 left the job without calling "
                                                           "hvd::shutdown()"));
  const ResponseList first = c.take();
  CHECK(first.fatal == c.fatal());
  CHECK_THAT(first.fatal, Catch::Matchers::ContainsSubstring("rank 1 left"));
  CHECK(first.fatal_status == HVD_ERR_PEER_LOST);  // a lost peer, not an engine failure
  CHECK(c.take().fatal.empty());
  c.rank_left(2);  // the first cause stays the one reported
  CHECK(c.take().fatal.empty());
  CHECK_THAT(c.fatal(), Catch::Matchers::ContainsSubstring("rank 1 left"));
  // A request after the loss gets no error of its own ("rank(s) 1 already shut down", another
  // status): the fatal PEER_LOST is what fails it, as every other pending op (seen in the
  // elastic Fashion-MNIST e2e: the survivors' next gradient failed that way and they quit).
  Controller e = controller(3);
  e.rank_left(1);
  e.add(0, names_list({"grad.b2"}), at(1));
  const ResponseList after = e.take();
  CHECK(after.responses.empty());
  CHECK(after.fatal_status == HVD_ERR_PEER_LOST);

  // After its shutdown message, a rank's connection closing is a normal goodbye.
  Controller d = controller(2);
  d.add(1, list_of({}, true), at(0));
  d.rank_left(1);
  CHECK(d.fatal().empty());
  CHECK(d.take().fatal.empty());
  CHECK_FALSE(d.everyone_shut_down());
}

// ---- stalls ----

TEST_CASE("controller: stall warnings name the missing ranks, once per period", "[libhvd]") {
  Controller c(ControllerOptions{.size = 2, .stall_warning = std::chrono::seconds(2)});
  CHECK_FALSE(c.next_stall_check().has_value());
  c.add(0, names_list({"A"}), at(0));
  CHECK(c.next_stall_check() == at(2));
  CHECK(c.check_stalls(at(1)).empty());
  const std::vector<std::string> warnings = c.check_stalls(at(2.5));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::StartsWith("stall: rank 1 has not submitted tensor "
                                                      "'A'"));
  CHECK_THAT(warnings[0], Catch::Matchers::ContainsSubstring("2 s or more"));
  CHECK(c.next_stall_check() == at(4.5));
  CHECK(c.check_stalls(at(3)).empty());
  CHECK(c.check_stalls(at(4.4)).empty());
  CHECK(c.check_stalls(at(4.75)).size() == 1);
  CHECK(c.next_stall_check() == at(6.75));
  CHECK(c.take().fatal.empty());  // no stall shutdown set

  c.add(1, names_list({"A"}), at(5));
  CHECK(names_of(c.take()) == std::vector<Names>{{"A"}});
  CHECK_FALSE(c.next_stall_check().has_value());
  CHECK(c.check_stalls(at(100)).empty());
}

TEST_CASE("controller: one stall line per missing rank, listing its tensors", "[libhvd]") {
  Controller c(ControllerOptions{.size = 3, .stall_warning = std::chrono::seconds(1)});
  c.add(0, names_list({"A", "B"}), at(0));
  c.add(1, names_list({"A"}), at(0.5));
  c.add(0, names_list({"late"}), at(0.75));
  CHECK(c.next_stall_check() == at(1));
  const std::vector<std::string> warnings = c.check_stalls(at(1.25));  // "late" is not due yet
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0], Catch::Matchers::StartsWith("stall: rank 1 has not submitted tensor "
                                                      "'B',"));
  CHECK_THAT(warnings[0], Catch::Matchers::ContainsSubstring("1 s or more"));
  CHECK_THAT(warnings[1], Catch::Matchers::StartsWith("stall: rank 2 has not submitted tensors "
                                                      "'A', 'B',"));
  CHECK(c.next_stall_check() == at(1.75));
  const std::vector<std::string> next = c.check_stalls(at(1.75));
  REQUIRE(next.size() == 2);
  CHECK_THAT(next[0],
             Catch::Matchers::StartsWith("stall: rank 1 has not submitted tensor 'late',"));
  CHECK_THAT(next[1],
             Catch::Matchers::StartsWith("stall: rank 2 has not submitted tensor 'late',"));
}

TEST_CASE("controller: stall_warning 0 turns the stall check off", "[libhvd]") {
  Controller c(ControllerOptions{.size = 2, .stall_warning = std::chrono::milliseconds(0)});
  c.add(0, names_list({"A"}), at(0));
  CHECK_FALSE(c.next_stall_check().has_value());
  CHECK(c.check_stalls(at(1e6)).empty());
  CHECK(c.take().responses.empty());
}

TEST_CASE("controller: a stall past stall_shutdown is fatal, delivered by take()", "[libhvd]") {
  Controller c(ControllerOptions{.size = 3,
                                 .stall_warning = std::chrono::seconds(2),
                                 .stall_shutdown = std::chrono::seconds(5)});
  c.add(0, names_list({"A"}), at(0));
  c.add(2, names_list({"A"}), at(0));
  CHECK(c.next_stall_check() == at(2));
  CHECK(c.check_stalls(at(2)).size() == 1);
  CHECK(c.next_stall_check() == at(4));
  CHECK(c.check_stalls(at(4)).size() == 1);
  CHECK(c.next_stall_check() == at(5));  // the shutdown comes before the next warning
  CHECK(c.check_stalls(at(4.9)).empty());
  CHECK(c.fatal().empty());
  CHECK(c.take().fatal.empty());
  c.check_stalls(at(5));
  const std::string expected =
      "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (5 s): tensor 'A' was never "
      "submitted by rank(s) 1";
  CHECK(c.fatal() == expected);
  const ResponseList out = c.take();
  CHECK(out.fatal == expected);
  CHECK(out.responses.empty());
  CHECK(c.take().fatal.empty());
  // Once fatal, the inspector is quiet: no wake-up time that is always due (a busy loop).
  CHECK(c.next_stall_check() == std::nullopt);
  CHECK(c.check_stalls(at(100)).empty());
}
