// libhvd's control-plane codec (allreduce/engine/messages.h): round trips, truncation, absurd sizes
// and enum values out of range, all refused as malformed messages.
#include "tests/unit/libhvd_control_helpers.h"

TEST_CASE("codec: RequestList and ResponseList round-trip every field", "[libhvd]") {
  const RequestList requests = full_request_list();
  CHECK(hvd::runtime::decode_requests(hvd::runtime::encode(requests)) == requests);
  const ResponseList responses = full_response_list();
  CHECK(hvd::runtime::decode_responses(hvd::runtime::encode(responses)) == responses);

  // Empty lists: the flag/fatal and a zero count, and nothing else.
  CHECK(hvd::runtime::encode(RequestList{}) == "\0\0\0\0\0"s);
  CHECK(hvd::runtime::encode(RequestList{{}, true}) == "\1\0\0\0\0"s);
  CHECK(hvd::runtime::decode_requests("\1\0\0\0\0"s) == RequestList{{}, true});
  CHECK(hvd::runtime::encode(ResponseList{}) == std::string(9, '\0'));
  CHECK(hvd::runtime::decode_responses(std::string(9, '\0')) == ResponseList{});
}

TEST_CASE("codec: every truncation and trailing garbage throw StatusError(INTERNAL)", "[libhvd]") {
  const std::string req = hvd::runtime::encode(full_request_list());
  for (std::size_t n = 0; n < req.size(); ++n) {
    INFO("request prefix of " << n << " of " << req.size() << " bytes");
    REQUIRE(status_thrown([&] { hvd::runtime::decode_requests(req.substr(0, n)); }) ==
            HVD_ERR_INTERNAL);
  }
  const std::string resp = hvd::runtime::encode(full_response_list());
  for (std::size_t n = 0; n < resp.size(); ++n) {
    INFO("response prefix of " << n << " of " << resp.size() << " bytes");
    REQUIRE(status_thrown([&] { hvd::runtime::decode_responses(resp.substr(0, n)); }) ==
            HVD_ERR_INTERNAL);
  }
  CHECK(status_thrown([&] { hvd::runtime::decode_requests(req + "x"); }) == HVD_ERR_INTERNAL);
  CHECK(status_thrown([&] { hvd::runtime::decode_responses(resp + '\0'); }) == HVD_ERR_INTERNAL);
}

TEST_CASE("codec: absurd counts and lengths throw instead of allocating", "[libhvd]") {
  const std::string huge = "\xFF\xFF\xFF\xFF"s;
  // 2^32-1 requests / responses / names, a 4 GiB name, 2^32-1 dimensions; a little data follows.
  const std::string pad(64, '\0');
  CHECK(status_thrown([&] { hvd::runtime::decode_requests("\0"s + huge + pad); }) ==
        HVD_ERR_INTERNAL);
  CHECK(status_thrown([&] { hvd::runtime::decode_requests("\0\1\0\0\0"s + huge + pad); }) ==
        HVD_ERR_INTERNAL);
  // One request with an empty name whose dimension count is absurd.
  const std::string dims_prefix = "\0\1\0\0\0"s + "\0\0\0\0"s + "\0"s + std::string(12, '\0');
  CHECK(status_thrown([&] { hvd::runtime::decode_requests(dims_prefix + huge + pad); }) ==
        HVD_ERR_INTERNAL);
  CHECK(status_thrown([&] { hvd::runtime::decode_responses(huge + pad); }) == HVD_ERR_INTERNAL);
  CHECK(status_thrown([&] { hvd::runtime::decode_responses("\0\0\0\0\0"s + huge + pad); }) ==
        HVD_ERR_INTERNAL);
  const std::string one_response = "\0\0\0\0\0"s + "\1\0\0\0"s + "\0"s + "\0\0\0\0"s;
  CHECK(status_thrown([&] { hvd::runtime::decode_responses(one_response + huge + pad); }) ==
        HVD_ERR_INTERNAL);
  // A count that passes the size sanity check but whose items run out.
  CHECK(status_thrown([&] {
          hvd::runtime::decode_requests("\0"s + "\xE8\3\0\0"s + std::string(4000, '\0'));
        }) == HVD_ERR_INTERNAL);
}

TEST_CASE("codec: an enum value out of range is a malformed message", "[libhvd]") {
  RequestList list = names_list({"A"});
  std::string bytes = hvd::runtime::encode(list);
  // Layout: shutdown u8, count u32, name (u32 length + 1 byte), then the kind byte.
  const std::size_t kind_at = 1 + 4 + 4 + 1;
  REQUIRE(bytes[kind_at] == static_cast<char>(OpKind::kAllreduce));
  bytes[kind_at] = 99;
  CHECK(status_thrown([&] { hvd::runtime::decode_requests(bytes); }) == HVD_ERR_INTERNAL);
  bytes[kind_at] = static_cast<char>(OpKind::kAllreduce);

  // The dtype (i32) follows the kind: int16, the last value appended, is a peer's valid dtype;
  // one past it is not.
  const std::size_t dtype_at = kind_at + 1;
  bytes[dtype_at] = static_cast<char>(HVD_INT16);
  CHECK(hvd::runtime::decode_requests(bytes).requests.at(0).dtype == DataType::kInt16);
  bytes[dtype_at] = static_cast<char>(HVD_INT16 + 1);
  CHECK(status_thrown([&] { hvd::runtime::decode_requests(bytes); }) == HVD_ERR_INTERNAL);

  // ResponseList: fatal (u32 length + text), then the fatal status byte: 0 backend, 1 peer lost.
  ResponseList lost;
  lost.fatal = "x";
  lost.fatal_status = HVD_ERR_PEER_LOST;
  std::string resp = hvd::runtime::encode(lost);
  REQUIRE(resp[4 + 1] == 1);
  resp[4 + 1] = 2;
  CHECK(status_thrown([&] { hvd::runtime::decode_responses(resp); }) == HVD_ERR_INTERNAL);
}
