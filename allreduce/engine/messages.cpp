#include "allreduce/engine/messages.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>

#include "allreduce/api/status_error.h"
#include "allreduce/kernels/dtype.h"

namespace hvd::runtime {
namespace {

[[noreturn]] void malformed() {
  throw StatusError(HVD_ERR_INTERNAL, "malformed engine control message",
                    "every rank must run the same libhvd version");
}

class Writer {
 public:
  explicit Writer(std::size_t reserve = 0) { out_.reserve(reserve); }
  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_.append(raw, sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    need(n);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  std::uint32_t get_count(std::size_t min_item_bytes) {
    const auto n = get<std::uint32_t>();
    if (static_cast<std::size_t>(n) * min_item_bytes > in_.size() - at_) malformed();
    return n;
  }
  void finish() const {
    if (at_ != in_.size()) malformed();
  }
  std::string_view rest() {
    std::string_view r = in_.substr(at_);
    at_ = in_.size();
    return r;
  }

 private:
  void need(std::size_t n) const {
    if (in_.size() - at_ < n) malformed();
  }
  std::string_view in_;
  std::size_t at_ = 0;
};

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

constexpr std::string_view kAutomaticPrefix = "hvd.";

// Enum values read off the wire, range-checked: a bad one is a malformed message.
template <class E>
E checked(std::int64_t value, std::int64_t max) {
  if (value < 0 || value > max) {
    throw StatusError(HVD_ERR_INTERNAL, "malformed engine control message (enum out of range)",
                      "every rank must run the same libhvd version");
  }
  return static_cast<E>(value);
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kReducescatter:
      return "reducescatter";
    case OpKind::kAlltoall:
      return "alltoall";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kJoin:
      return "join";
  }
  return "invalid op kind";
}

std::string automatic_name(OpKind kind, long long n) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  std::string name(kAutomaticPrefix);
  name += op_kind_name(kind);
  name += '.';
  name.append(digits, end);
  return name;
}

bool is_automatic_name(std::string_view name) {
  if (!name.starts_with(kAutomaticPrefix)) return false;
  name.remove_prefix(kAutomaticPrefix.size());
  const auto dot = name.find('.');
  if (dot == std::string_view::npos || dot + 1 == name.size()) return false;
  const std::string_view kind = name.substr(0, dot);
  bool known = false;
  for (auto k = static_cast<int>(OpKind::kAllreduce); k <= static_cast<int>(OpKind::kJoin); ++k) {
    known |= kind == op_kind_name(static_cast<OpKind>(k));
  }
  // The counter, then for a member of a synchronous group "_<i>of<n>" (group_member_name).
  std::string_view rest = name.substr(dot + 1);
  const auto digits = [&rest] {
    const auto n =
        std::find_if(rest.begin(), rest.end(), [](char c) { return c < '0' || c > '9'; });
    const bool any = n != rest.begin();
    rest.remove_prefix(static_cast<std::size_t>(n - rest.begin()));
    return any;
  };
  if (!known || !digits()) return false;
  if (rest.empty()) return true;
  if (!rest.starts_with('_')) return false;
  rest.remove_prefix(1);
  if (!digits() || !rest.starts_with("of")) return false;
  rest.remove_prefix(2);
  return digits() && rest.empty();
}

std::uint64_t group_id(OpKind kind, std::string_view base) {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a 64
  const auto mix = [&h](std::string_view bytes) {
    for (char c : bytes) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ULL;
    }
  };
  mix(op_kind_name(kind));
  mix(std::string_view("\0", 1));  // no kind name is a prefix of another's with a NUL
  mix(base);
  return h == 0 ? 1 : h;
}

std::string_view group_base(std::string_view member) {
  const auto underscore = member.rfind('_');
  return underscore == std::string_view::npos ? member : member.substr(0, underscore);
}

std::string group_member_name(std::string_view base, std::size_t index, std::size_t count) {
  std::string name(base);
  name += '_';
  name += std::to_string(index + 1);
  name += "of";
  name += std::to_string(count);
  return name;
}

namespace {
// A request is about 60 bytes plus its name and shape.
std::size_t encoded_size(const Request& r) { return 72 + r.name.size() + 8 * r.shape.size(); }

void write(Writer& w, const Request& r) {
  w.put_string(r.name);
  w.put(static_cast<std::uint8_t>(r.kind));
  w.put(static_cast<std::int32_t>(r.dtype));
  w.put(static_cast<std::int32_t>(r.device.kind));
  w.put(static_cast<std::int32_t>(r.device.id));
  w.put(static_cast<std::uint32_t>(r.shape.size()));
  for (std::int64_t d : r.shape) w.put(d);
  w.put(static_cast<std::int32_t>(r.op));
  w.put(r.prescale);
  w.put(r.postscale);
  w.put(r.root);
  w.put(r.group);
  w.put(r.group_size);
}

// A RequestList's encoding, from its requests one by one (`get` turns an element of `requests`
// into a Request), after `hits` when `contribution` (a cycle contribution's head).
template <class Range, class Get>
std::string encode_requests(bool contribution, std::span<const std::uint32_t> hits,
                            const Range& requests, Get get, bool shutdown) {
  std::size_t size = (contribution ? 4 + 4 * hits.size() : 0) + 5;
  for (const auto& r : requests) size += encoded_size(get(r));
  Writer w(size);
  if (contribution) {
    w.put(static_cast<std::uint32_t>(hits.size()));
    for (std::uint32_t id : hits) w.put(id);
  }
  w.put<std::uint8_t>(shutdown ? 1 : 0);
  w.put(static_cast<std::uint32_t>(std::size(requests)));
  for (const auto& r : requests) write(w, get(r));
  return w.take();
}

const Request& itself(const Request& r) { return r; }
const Request& pointee(const Request* r) { return *r; }
}  // namespace

std::string encode(const RequestList& list) {
  return encode_requests(false, {}, list.requests, itself, list.shutdown);
}

RequestList decode_requests(std::string_view bytes) {
  Reader r(bytes);
  RequestList list;
  list.shutdown = r.get<std::uint8_t>() != 0;
  const auto n = r.get_count(4);
  list.requests.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    Request q;
    q.name = r.get_string();
    q.kind = checked<OpKind>(r.get<std::uint8_t>(), static_cast<int>(OpKind::kJoin));
    q.dtype = checked<DataType>(r.get<std::int32_t>(), kMaxDtype);
    q.device.kind = checked<Device::Kind>(r.get<std::int32_t>(), 1);
    q.device.id = r.get<std::int32_t>();
    const auto dims = r.get_count(8);
    q.shape.reserve(dims);
    for (std::uint32_t d = 0; d < dims; ++d) q.shape.push_back(r.get<std::int64_t>());
    q.op = checked<ReduceOp>(r.get<std::int32_t>(), HVD_PRODUCT);
    q.prescale = r.get<double>();
    q.postscale = r.get<double>();
    q.root = r.get<std::int32_t>();
    q.group = r.get<std::uint64_t>();
    q.group_size = r.get<std::uint32_t>();
    list.requests.push_back(std::move(q));
  }
  r.finish();
  return list;
}

std::string encode(const ResponseList& list) {
  Writer w;
  w.put_string(list.fatal);
  w.put(static_cast<std::uint8_t>(list.fatal_status == HVD_ERR_PEER_LOST ? 1 : 0));
  w.put(static_cast<std::uint32_t>(list.responses.size()));
  for (const Response& r : list.responses) {
    w.put(static_cast<std::uint8_t>(r.kind));
    w.put(static_cast<std::uint8_t>(r.departed ? 1 : 0));
    w.put_string(r.error);
    w.put(static_cast<std::uint32_t>(r.names.size()));
    for (const std::string& name : r.names) w.put_string(name);
  }
  return w.take();
}

ResponseList decode_responses(std::string_view bytes) {
  Reader r(bytes);
  ResponseList list;
  list.fatal = r.get_string();
  list.fatal_status =
      checked<std::uint8_t>(r.get<std::uint8_t>(), 1) == 1 ? HVD_ERR_PEER_LOST : HVD_ERR_BACKEND;
  const auto n = r.get_count(10);
  for (std::uint32_t i = 0; i < n; ++i) {
    Response p;
    p.kind = checked<OpKind>(r.get<std::uint8_t>(), static_cast<int>(OpKind::kJoin));
    p.departed = checked<std::uint8_t>(r.get<std::uint8_t>(), 1) == 1;
    p.error = r.get_string();
    const auto names = r.get_count(4);
    for (std::uint32_t k = 0; k < names; ++k) p.names.push_back(r.get_string());
    list.responses.push_back(std::move(p));
  }
  r.finish();
  return list;
}

// A contribution carries a RequestList as its tail.
std::string encode(const CycleContribution& c) {
  return encode_requests(true, c.hits, c.misses.requests, itself, c.misses.shutdown);
}

std::string encode_contribution(std::span<const std::uint32_t> hits,
                                std::span<const Request* const> misses, bool shutdown) {
  return encode_requests(true, hits, misses, pointee, shutdown);
}

CycleContribution decode_contribution(std::string_view bytes) {
  Reader r(bytes);
  CycleContribution c;
  const auto n = r.get_count(4);
  c.hits.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) c.hits.push_back(r.get<std::uint32_t>());
  c.misses = decode_requests(r.rest());
  return c;
}

void frame_contribution(std::string& head, std::string_view data) {
  const std::size_t head_size = head.size();
  const std::size_t at =
      data.empty() ? head_size : (head_size + kEagerAlign - 1) / kEagerAlign * kEagerAlign;
  head.reserve(at + data.size() + 8);
  head.resize(at, '\0');
  head.append(data);
  Writer w(8);
  w.put(static_cast<std::uint32_t>(head_size));
  w.put(static_cast<std::uint32_t>(data.size()));
  head += w.take();
}

FramedContribution unframe_contribution(std::string_view bytes) {
  if (bytes.size() < 8) malformed();
  Reader trailer(bytes.substr(bytes.size() - 8));
  const std::size_t head = trailer.get<std::uint32_t>(), data = trailer.get<std::uint32_t>();
  const std::size_t at = data == 0 ? head : (head + kEagerAlign - 1) / kEagerAlign * kEagerAlign;
  if (at + data + 8 != bytes.size()) malformed();
  return {bytes.substr(0, head), bytes.substr(at, data)};
}

std::string encode(const CycleSignal& s) {
  Writer w;
  w.put(s.doorbell);
  w.put_string(s.fatal);
  w.put(static_cast<std::uint8_t>(s.fatal_status == HVD_ERR_PEER_LOST ? 1 : 0));
  return w.take();
}

CycleSignal decode_signal(std::string_view bytes) {
  Reader r(bytes);
  CycleSignal s;
  s.doorbell = r.get<std::uint64_t>();
  s.fatal = r.get_string();
  s.fatal_status =
      checked<std::uint8_t>(r.get<std::uint8_t>(), 1) == 1 ? HVD_ERR_PEER_LOST : HVD_ERR_BACKEND;
  r.finish();
  return s;
}

}  // namespace hvd::runtime
