// libhvd's side of a rank's report channel to its agent (contract/report.h): rank 0's engine
// tells hvdrun about a stall as data, so that hvdrun can name the culprit (docs/why.md).
#pragma once

#include <string>
#include <string_view>

#include "allreduce/engine/controller.h"

namespace hvd::runtime {

// The report as one line of JSON, newline included: {"kind":"stall","process_set":N,
// "set_label":"...","tensors":[{"tensor":"...","op":"allreduce","seconds":3.1,"waiting":[0,1],
// "missing":[{"rank":2,"submitted":["..."]}]}]} ("op":"negotiation" for a cycle some ranks'
// engines never answered: StalledTensor::cycle). Tensors are left out from the end until the
// line fits contract::kMaxReportLine (a "left_out" count says how many). Pure.
std::string encode_stall_report(const StallReport& report);

// The hold figures (stragglers) as one line: {"kind":"holds","process_set":N,"elapsed_s":E,
// "ops":K,"final":false,"ranks":[{"rank":0,"held_s":0.012,"last":3},...]}. A line of a rank
// needs about 50 bytes: the ranks past the channel's limit (over a thousand) are left out, with
// a "left_out" count. Pure.
std::string encode_hold_report(const HoldReport& report);

// Writes `line` to `fd` without blocking; false when it did not go whole (a full pipe: the
// agent is not reading; a closed one). Never throws, never waits.
bool send_report_line(int fd, std::string_view line);

// Marks the report and stack descriptors close-on-exec, so that a program the rank starts does
// not hold them (contract/report.h); `report_fd` -1: nothing to do.
void keep_report_fds_private(int report_fd);

}  // namespace hvd::runtime
