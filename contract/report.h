// A rank's report channel to its host agent (docs/why.md): how libhvd and the Python
// binding tell hvdrun what only the rank knows, and how the agent reads a rank's Python stack.
//
// Every rank a native launch starts (not under --mpi or a user's own mpirun: no agent owns those
// ranks) gets two descriptors from its agent:
// - HVD_REPORT_FD (4): the write end of a pipe; one JSON object a line, at most kMaxReportLine
//   bytes with its newline (the agent drops a longer line and says so). The lines:
//     {"kind":"stall", ...}   rank 0's engine found tensors waiting past the stall warning time
//                             (allreduce/runtime/report_channel.h writes it; the fields are
//                             docs/why.md's), or, with "shutdown":true, past the shutdown time
//     {"kind":"holds", ...}   rank 0's engine's figures of who held the others up (stragglers:
//                             docs/why.md), every few seconds and at the end
//     {"kind":"stack_handler","signal":N,"pid":P}
//                             the Python binding installed faulthandler for signal N in process
//                             P (the rank, or a process it started: `sh -c "python ..."`): the
//                             agent may send N to P, if P is in the rank's process group, to
//                             read its threads' stacks on HVD_STACK_FD
//   libhvd writes without blocking and drops a line the pipe cannot take (an agent that does not
//   read must never stop the engine).
// - HVD_STACK_FD (5): the write end of a second pipe, where faulthandler writes the stacks of
//   every thread when the agent sends the announced signal. Its own pipe, because faulthandler
//   writes a dump in many small pieces that must not mix with report lines.
// Both are close-on-exec in the rank once libhvd or the binding took them, so that a program the
// rank starts does not hold them. Pure constants.
#pragma once

#include <cstddef>

namespace hvd::contract {

inline constexpr int kReportChannelFd = 4;
inline constexpr int kStackChannelFd = 5;
inline constexpr std::size_t kMaxReportLine = 64 * 1024;
// libhvd's background thread's name (pthread_setname_np), by which an agent finds it among the
// rank's threads (/proc/PID/task/*/comm) to say what the engine is doing.
inline constexpr const char* kEngineThreadName = "hvd-engine";

}  // namespace hvd::contract
