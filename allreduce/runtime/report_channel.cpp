#include "allreduce/runtime/report_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "common/json_text.h"
#include "contract/report.h"

namespace hvd::runtime {
namespace {

std::string ints(const std::vector<int>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  return out + "]";
}

std::string tensor_json(const StalledTensor& t) {
  std::string missing = "[";
  for (std::size_t i = 0; i < t.missing.size(); ++i) {
    if (i > 0) missing += ',';
    std::string submitted = "[";
    for (std::size_t j = 0; j < t.missing[i].submitted.size(); ++j) {
      if (j > 0) submitted += ',';
      submitted += '"' + json_escape(t.missing[i].submitted[j]) + '"';
    }
    submitted += ']';
    missing += fmt::format(R"({{"rank":{},"submitted":{}}})", t.missing[i].rank, submitted);
  }
  missing += ']';
  return fmt::format(R"({{"tensor":"{}","op":"{}","seconds":{:.3f},"waiting":{},"missing":{}}})",
                     json_escape(t.name), t.cycle ? "negotiation" : op_kind_name(t.kind),
                     static_cast<double>(t.waited.count()) / 1000.0, ints(t.waiting), missing);
}

}  // namespace

std::string encode_stall_report(const StallReport& report) {
  const std::string head =
      fmt::format(R"({{"kind":"stall","process_set":{},"set_label":"{}","tensors":[)",
                  report.process_set, json_escape(report.set_label));
  std::string tensors;
  std::size_t taken = 0;
  for (const StalledTensor& t : report.tensors) {
    std::string one = tensor_json(t);
    // Room for the head, this tensor, the tail with a left_out count and the newline.
    if (head.size() + tensors.size() + one.size() + 40 > contract::kMaxReportLine) break;
    if (taken > 0) tensors += ',';
    tensors += one;
    ++taken;
  }
  return fmt::format(R"({}{}],"left_out":{}{}}})"
                     "\n",
                     head, tensors, report.tensors.size() - taken,
                     report.shutdown ? R"(,"shutdown":true)" : "");
}

std::string encode_hold_report(const HoldReport& report) {
  std::string out = fmt::format(
      R"({{"kind":"holds","process_set":{},"elapsed_s":{:.3f},"ops":{},"final":{},"ranks":[)",
      report.process_set, static_cast<double>(report.elapsed.count()) / 1000.0, report.ops,
      report.final ? "true" : "false");
  std::size_t taken = 0;
  for (const HoldReport::Rank& r : report.ranks) {
    const std::string one = fmt::format(R"({{"rank":{},"held_s":{:.3f},"last":{}}})", r.rank,
                                        static_cast<double>(r.held.count()) / 1000.0, r.last);
    if (out.size() + one.size() + 40 > contract::kMaxReportLine) break;
    if (taken > 0) out += ',';
    out += one;
    ++taken;
  }
  return out + fmt::format(R"(],"left_out":{}}})"
                           "\n",
                           report.ranks.size() - taken);
}

bool send_report_line(int fd, std::string_view line) {
  if (fd < 0) return false;
  // Non-blocking on this process's copy (the agent's end is its own): a full pipe drops the
  // line rather than stopping the engine. A line longer than PIPE_BUF may go in pieces; the rest
  // of one begun is waited for a little (a torn line would spoil the next one too).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  if ((flags & O_NONBLOCK) == 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return false;
  std::size_t done = 0;
  int waits = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && done > 0 && waits < 20) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 10);  // at most 200 ms in all
      ++waits;
    } else {
      return false;
    }
  }
  return true;
}

void keep_report_fds_private(int report_fd) {
  if (report_fd < 0) return;
  for (const int fd : {report_fd, contract::kStackChannelFd}) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

}  // namespace hvd::runtime
