// The negotiation cycles' collectives over MPI (cycle_transport.h), on a communicator of their
// own. The AND round is one MPI_Iallreduce (MPI_BAND) of a few words. The allgather round is one
// MPI_Iallgather of a fixed 1 KiB slot per rank; every rank then knows every contribution's
// length, so when one did not fit in its slot (a job's first steps: full requests) every rank
// makes the same second, blocking round for the rests (MPI_Allgatherv) while all are in the cycle.
#include <mpi.h>

#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/status_error.h"
#include "allreduce/backends/mpi_backend.h"

namespace hvd::runtime {
namespace {

constexpr std::size_t kSlot = 1024;  // per rank and cycle: u32 length, then the bytes
constexpr std::size_t kSlotData = kSlot - 4;

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
    slots_.resize(kSlot * static_cast<std::size_t>(size_));
    out_.resize(static_cast<std::size_t>(size_));
    counts_.resize(out_.size());
    displs_.resize(out_.size());
  }
  ~MpiCycleTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  void start(std::string contribution) override {
    mine_ = std::move(contribution);
    const auto n = static_cast<std::uint32_t>(mine_.size());
    std::memcpy(slot_, &n, 4);
    std::memcpy(slot_ + 4, mine_.data(), std::min(mine_.size(), kSlotData));
    check(MPI_Iallgather(slot_, kSlot, MPI_BYTE, slots_.data(), kSlot, MPI_BYTE, comm_, &request_),
          "MPI_Iallgather");
  }

  void start_and(std::vector<std::uint64_t> words) override {
    words_ = std::move(words);
    anded_.assign(words_.size(), 0);
    check(MPI_Iallreduce(words_.data(), anded_.data(), static_cast<int>(words_.size()),
                         MPI_UINT64_T, MPI_BAND, comm_, &request_),
          "MPI_Iallreduce");
  }

  std::optional<std::vector<std::uint64_t>> anded() override {
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return std::nullopt;
    return anded_;
  }

  const std::vector<std::string>* gathered() override {
    int done = 0;
    check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return nullptr;
    const auto length = [&](std::size_t r) {
      std::uint32_t n;
      std::memcpy(&n, &slots_[kSlot * r], 4);
      return static_cast<std::size_t>(n);
    };
    int total = 0;  // what did not fit in the slots
    for (std::size_t r = 0; r < out_.size(); ++r) {
      counts_[r] = length(r) > kSlotData ? static_cast<int>(length(r) - kSlotData) : 0;
      displs_[r] = total;
      total += counts_[r];
    }
    if (total > 0) {  // every rank sees the same lengths, so every rank makes this call
      rests_.assign(static_cast<std::size_t>(total), '\0');
      const int mine = mine_.size() > kSlotData ? static_cast<int>(mine_.size() - kSlotData) : 0;
      check(MPI_Allgatherv(mine_.data() + (mine > 0 ? kSlotData : 0), mine, MPI_BYTE, rests_.data(),
                           counts_.data(), displs_.data(), MPI_BYTE, comm_),
            "MPI_Allgatherv");
    }
    for (std::size_t r = 0; r < out_.size(); ++r) {  // assign(): the strings keep their buffers
      out_[r].assign(&slots_[kSlot * r + 4], std::min(length(r), kSlotData));
      if (counts_[r] > 0) {
        out_[r].append(rests_, static_cast<std::size_t>(displs_[r]),
                       static_cast<std::size_t>(counts_[r]));
      }
    }
    return &out_;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  std::string mine_;
  char slot_[kSlot] = {};
  std::vector<char> slots_;  // every rank's slot
  // The round's result by rank, with what the second round needed; reused from round to round.
  std::vector<std::string> out_;
  std::vector<int> counts_, displs_;
  std::string rests_;
  std::vector<std::uint64_t> words_, anded_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

std::unique_ptr<CycleTransport> MpiBackend::cycle_transport() {
  return std::make_unique<MpiCycleTransport>(comm_);
}

}  // namespace hvd::runtime
