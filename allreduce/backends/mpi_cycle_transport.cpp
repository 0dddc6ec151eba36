// The negotiation cycles' collectives over MPI (cycle_transport.h), on a communicator of their
// own. The AND round is one MPI_Iallreduce (MPI_BAND) of a few words (or, when every rank's words
// together are small, an allgather of them ANDed here: kAndByGather). The allgather round is one
// MPI_Iallgather of a slot per rank; every rank then knows every contribution's length, so when
// one did not fit in its slot (a job's first steps: full requests) every rank makes the same
// second, blocking round for the rests (MPI_Allgatherv) while all are in the cycle.
//
// The slot's size follows the contributions, the same way on every rank (from the lengths every
// rank has seen): 128 bytes to 1 KiB, doubled at once to fit the longest contribution of the last
// round, halved after kShrinkAfter rounds in a row whose longest fitted in half of it. The round's
// latency grows with it (2 ranks, shared memory, MPI_Iallgather and MPI_Test: 0.52 us at 128
// bytes, 0.70 at 256, 1.1 at 1 KiB), and a synchronous call brings about 90 bytes. A contribution
// that carries a tensor's data (an eager allreduce, cycle_engine.h: flagged in the length's top
// bit) may grow the slot past 1 KiB, to its length rounded up to kDataSlotStep (not a power of
// two: over shared memory a 2 KiB tensor must stay under Open MPI's 4 KiB eager limit), so that
// a loop of such calls makes one round each; shorter ones are sized as any other.
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/backends/mpi_backend.h"

namespace hvd::runtime {
namespace {

// Per rank and cycle: u32 length, then the bytes.
constexpr std::size_t kMinSlot = 128;
constexpr std::size_t kMaxSlot = 1024;
constexpr std::size_t kDataSlotStep = 512;
constexpr std::size_t kMaxDataSlot = 128 * 1024;
constexpr std::uint32_t kDataFlag = 0x80000000u;  // in a slot's length: it carries data
constexpr int kShrinkAfter = 16;
// An AND round of at most this many bytes from all ranks together is an allgather of the words,
// ANDed by each rank: one exchange where Open MPI's MPI_Iallreduce makes two (2 ranks, 3 words,
// MPI_Test polling: 0.44 against 0.75 us over shared memory, 4.9 against 7.7 us over TCP; 3
// ranks: 1.84 against 2.31 us, but 33 words, 792 bytes: 3.51 against 2.80). Larger, the
// MPI_Iallreduce, whose size does not grow with the number of ranks.
constexpr std::size_t kAndByGather = 512;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw StatusError(HVD_ERR_BACKEND, fmt::format("{} (the engine's negotiation) failed: {}", what,
                                                 std::string(text, static_cast<std::size_t>(n))));
}

class MpiCycleTransport : public CycleTransport {
 public:
  explicit MpiCycleTransport(MPI_Comm world) {
    check(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_size(comm_, &size_);
    out_.resize(static_cast<std::size_t>(size_));
    counts_.resize(out_.size());
    displs_.resize(out_.size());
  }
  ~MpiCycleTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  void start(std::string contribution, std::size_t data_bytes) override {
    mine_ = std::move(contribution);
    if (mine_.size() >= kDataFlag) {
      throw StatusError(HVD_ERR_INTERNAL,
                        fmt::format("a negotiation contribution of {} bytes", mine_.size()));
    }
    slot_.resize(slot_size_);
    slots_.resize(slot_size_ * static_cast<std::size_t>(size_));
    const auto n = static_cast<std::uint32_t>(mine_.size()) | (data_bytes > 0 ? kDataFlag : 0);
    std::memcpy(slot_.data(), &n, 4);
    std::memcpy(slot_.data() + 4, mine_.data(), std::min(mine_.size(), slot_size_ - 4));
    check(MPI_Iallgather(slot_.data(), static_cast<int>(slot_size_), MPI_BYTE, slots_.data(),
                         static_cast<int>(slot_size_), MPI_BYTE, comm_, &request_),
          "MPI_Iallgather");
  }

  void start_and(std::vector<std::uint64_t> words) override {
    words_ = std::move(words);
    anded_.assign(words_.size(), 0);
    const int n = static_cast<int>(words_.size());
    and_by_gather_ = words_.size() * 8 * static_cast<std::size_t>(size_) <= kAndByGather;
    if (and_by_gather_) {
      all_words_.resize(words_.size() * static_cast<std::size_t>(size_));
      check(MPI_Iallgather(words_.data(), n, MPI_UINT64_T, all_words_.data(), n, MPI_UINT64_T,
                           comm_, &request_),
            "MPI_Iallgather");
      return;
    }
    check(MPI_Iallreduce(words_.data(), anded_.data(), n, MPI_UINT64_T, MPI_BAND, comm_, &request_),
          "MPI_Iallreduce");
  }

  std::optional<std::vector<std::uint64_t>> anded() override {
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return std::nullopt;
    if (and_by_gather_) {
      const std::size_t n = words_.size();
      for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t w = ~std::uint64_t{0};
        for (int r = 0; r < size_; ++r) w &= all_words_[static_cast<std::size_t>(r) * n + i];
        anded_[i] = w;
      }
    }
    return anded_;
  }

  const std::vector<std::string>* gathered() override {
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return nullptr;
    const std::size_t slot = slot_size_, data = slot - 4;
    const auto header = [&](std::size_t r) {
      std::uint32_t n;
      std::memcpy(&n, &slots_[slot * r], 4);
      return n;
    };
    const auto length = [&](std::size_t r) {
      return static_cast<std::size_t>(header(r) & ~kDataFlag);
    };
    int total = 0;  // what did not fit in the slots
    std::size_t longest = 0, longest_data = 0;
    for (std::size_t r = 0; r < out_.size(); ++r) {
      counts_[r] = length(r) > data ? static_cast<int>(length(r) - data) : 0;
      displs_[r] = total;
      total += counts_[r];
      std::size_t& longest_of_kind = (header(r) & kDataFlag) != 0 ? longest_data : longest;
      longest_of_kind = std::max(longest_of_kind, length(r));
    }
    resize_slot(longest, longest_data);
    if (total > 0) {  // every rank sees the same lengths, so every rank makes this call
      rests_.assign(static_cast<std::size_t>(total), '\0');
      const int mine = mine_.size() > data ? static_cast<int>(mine_.size() - data) : 0;
      check(MPI_Allgatherv(mine_.data() + (mine > 0 ? data : 0), mine, MPI_BYTE, rests_.data(),
                           counts_.data(), displs_.data(), MPI_BYTE, comm_),
            "MPI_Allgatherv");
    }
    for (std::size_t r = 0; r < out_.size(); ++r) {  // assign(): the strings keep their buffers
      out_[r].assign(&slots_[slot * r + 4], std::min(length(r), data));
      if (counts_[r] > 0) {
        out_[r].append(rests_, static_cast<std::size_t>(displs_[r]),
                       static_cast<std::size_t>(counts_[r]));
      }
    }
    return &out_;
  }

 private:
  // The next rounds' slot (see the top of the file), from the longest contributions of this one
  // without and with data.
  void resize_slot(std::size_t longest, std::size_t longest_data) {
    const std::size_t before = slot_size_;
    std::size_t need = std::clamp(std::bit_ceil(longest + 4), kMinSlot, kMaxSlot);
    if (longest_data + 4 > kMaxSlot) {
      need = std::min(kMaxDataSlot,
                      (longest_data + 4 + kDataSlotStep - 1) / kDataSlotStep * kDataSlotStep);
    } else if (longest_data > 0) {
      need = std::max(need, std::clamp(std::bit_ceil(longest_data + 4), kMinSlot, kMaxSlot));
    }
    fitted_ = need <= slot_size_ / 2 ? fitted_ + 1 : 0;
    if (need > slot_size_) slot_size_ = need;
    if (fitted_ >= kShrinkAfter) {
      slot_size_ = slot_size_ > kMaxSlot ? std::max(kMaxSlot, slot_size_ / 2) : slot_size_ / 2;
      fitted_ = 0;
    }
    if (slot_size_ != before) {
      logger().debug("negotiation: allgather slot {} -> {} bytes (longest contribution {})", before,
                     slot_size_, longest);
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  std::string mine_;
  std::size_t slot_size_ = kMaxSlot;  // a job's first rounds bring full requests
  int fitted_ = 0;                    // rounds in a row whose longest fitted in half the slot
  std::vector<char> slot_;            // this rank's
  std::vector<char> slots_;           // every rank's slot
  // The round's result by rank, with what the second round needed; reused from round to round.
  std::vector<std::string> out_;
  std::vector<int> counts_, displs_;
  std::string rests_;
  std::vector<std::uint64_t> words_, anded_;
  bool and_by_gather_ = false;            // this AND round is an allgather, ANDed here
  std::vector<std::uint64_t> all_words_;  // its every rank's words
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

std::unique_ptr<CycleTransport> MpiBackend::cycle_transport() {
  return std::make_unique<MpiCycleTransport>(comm_);
}

}  // namespace hvd::runtime
