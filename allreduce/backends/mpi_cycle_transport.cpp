// The negotiation cycles' collectives over MPI (cycle_transport.h), on a communicator of their
// own. Each cycle is one MPI_Igather of a fixed slot per rank and one MPI_Ibcast of a fixed reply
// slot: a steady-state cycle (cache hits, a few hundred bytes) costs two small collectives. What
// does not fit in a slot follows in a second round, blocking, once every rank is in the cycle:
// a contribution's rest by MPI_Gatherv (rank 0 asks for it in a first reply), a reply's rest by
// MPI_Bcast.
#include <mpi.h>

#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/status_error.h"
#include "allreduce/backends/mpi_backend.h"

namespace hvd::runtime {
namespace {

constexpr std::size_t kSlot = 1024;       // per rank and cycle: u32 length, then the bytes
constexpr std::size_t kReplySlot = 2048;  // u32 length, u8 "send the rest", then the bytes
constexpr std::size_t kSlotData = kSlot - 4;
constexpr std::size_t kReplyData = kReplySlot - 5;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw StatusError(HVD_ERR_BACKEND,
                    fmt::format("{} (the engine's negotiation) failed: {}", what,
                                std::string(text, static_cast<std::size_t>(n))));
}

std::uint32_t read_u32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void write_u32(char* p, std::size_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  std::memcpy(p, &u, 4);
}

bool test(MPI_Request& request) {
  int done = 0;
  check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

class MpiCycleTransport : public CycleTransport {
 public:
  explicit MpiCycleTransport(MPI_Comm world) {
    check(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (rank_ == 0) slots_.resize(kSlot * static_cast<std::size_t>(size_));
  }
  ~MpiCycleTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  void start(std::string contribution) override {
    mine_ = std::move(contribution);
    write_u32(slot_, mine_.size());
    std::memcpy(slot_ + 4, mine_.data(), std::min(mine_.size(), kSlotData));
    check(MPI_Igather(slot_, kSlot, MPI_BYTE, rank_ == 0 ? slots_.data() : nullptr, kSlot, MPI_BYTE,
                      0, comm_, &gather_),
          "MPI_Igather");
    if (rank_ != 0) post_reply();
  }

  bool gathered() override {
    if (!test(gather_)) return false;
    bool overflow = false;
    for (int r = 0; r < size_; ++r) overflow |= length(r) > kSlotData;
    if (overflow) {  // first reply: "send the rest", then everyone's rest to rank 0
      write_u32(reply_, 0);
      reply_[4] = 1;
      check(MPI_Ibcast(reply_, kReplySlot, MPI_BYTE, 0, comm_, &bcast_), "MPI_Ibcast");
      check(MPI_Wait(&bcast_, MPI_STATUS_IGNORE), "MPI_Wait");
      gather_rest();
    }
    return true;
  }

  std::vector<std::string> contributions() override {
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    std::size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t n = length(r);
      std::string& c = out[static_cast<std::size_t>(r)];
      c.assign(&slots_[kSlot * static_cast<std::size_t>(r) + 4], std::min(n, kSlotData));
      if (n > kSlotData) {
        c.append(rest_.data() + at, n - kSlotData);
        at += n - kSlotData;
      }
    }
    return out;
  }

  void reply(const std::string& bytes) override {
    write_u32(reply_, bytes.size());
    reply_[4] = 0;
    std::memcpy(reply_ + 5, bytes.data(), std::min(bytes.size(), kReplyData));
    check(MPI_Ibcast(reply_, kReplySlot, MPI_BYTE, 0, comm_, &bcast_), "MPI_Ibcast");
    check(MPI_Wait(&bcast_, MPI_STATUS_IGNORE), "MPI_Wait");
    if (bytes.size() > kReplyData) {
      std::string rest = bytes.substr(kReplyData);
      check(MPI_Bcast(rest.data(), static_cast<int>(rest.size()), MPI_BYTE, 0, comm_), "MPI_Bcast");
    }
  }

  std::optional<std::string> replied() override {
    if (!test(gather_) || !test(bcast_)) return std::nullopt;
    if (reply_[4] == 1) {  // rank 0 asks for the rest of the contributions first
      gather_rest();
      post_reply();
      return std::nullopt;
    }
    const std::size_t n = read_u32(reply_);
    std::string bytes(reply_ + 5, std::min(n, kReplyData));
    if (n > kReplyData) {
      std::string rest(n - kReplyData, '\0');
      check(MPI_Bcast(rest.data(), static_cast<int>(rest.size()), MPI_BYTE, 0, comm_), "MPI_Bcast");
      bytes += rest;
    }
    return bytes;
  }

 private:
  std::size_t length(int r) const {
    return read_u32(&slots_[kSlot * static_cast<std::size_t>(r)]);
  }
  void post_reply() {
    check(MPI_Ibcast(reply_, kReplySlot, MPI_BYTE, 0, comm_, &bcast_), "MPI_Ibcast");
  }
  // Every rank's bytes past its slot, concatenated in rank order at rank 0.
  void gather_rest() {
    const int mine = mine_.size() > kSlotData ? static_cast<int>(mine_.size() - kSlotData) : 0;
    std::vector<int> counts, displs;
    if (rank_ == 0) {
      int total = 0;
      for (int r = 0; r < size_; ++r) {
        const std::size_t n = length(r);
        counts.push_back(n > kSlotData ? static_cast<int>(n - kSlotData) : 0);
        displs.push_back(total);
        total += counts.back();
      }
      rest_.assign(static_cast<std::size_t>(total), '\0');
    }
    check(MPI_Gatherv(mine_.data() + (mine > 0 ? kSlotData : 0), mine, MPI_BYTE, rest_.data(),
                      counts.data(), displs.data(), MPI_BYTE, 0, comm_),
          "MPI_Gatherv");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::string mine_;
  char slot_[kSlot] = {};
  char reply_[kReplySlot] = {};
  std::vector<char> slots_;  // rank 0: every rank's slot
  std::string rest_;         // rank 0: the contributions' rests
  MPI_Request gather_ = MPI_REQUEST_NULL;
  MPI_Request bcast_ = MPI_REQUEST_NULL;
};

}  // namespace

std::unique_ptr<CycleTransport> MpiBackend::cycle_transport() {
  return std::make_unique<MpiCycleTransport>(comm_);
}

}  // namespace hvd::runtime
