// horovodrun 0.28.1's flags that hvdrun takes for compatibility, beyond the ones it implements
// in full elsewhere (docs/cli.md, "horovodrun's command line" has the whole table):
// - tuning and library flags for what libhvd does not implement (--hierarchical-allreduce,
//   --autotune*, --timeline-mark-cycles, --num-nccl-streams,
//   --thread-affinity, --mpi-threads-disable, --log-with-timestamp): each sets the HOROVOD_*
//   variable horovodrun sets, and adds a warning to Options::warnings saying what libhvd does
//   instead (contract::unimplemented_knobs()); asking for what libhvd does anyway (0, --no-...)
//   warns of nothing;
// - flags hvdrun implements here: --gloo-timeout-seconds, --stall-check, --tcp,
//   --binding-args (with --mpi), --disable-cache (hvdrun keeps no cache), the timestamp and
//   tag flags of the console;
// - --jsrun: refused, hvdrun has no LSF launcher.
// Values are checked strictly, as for the engine flags (cli/engine_flags.h).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/options.h"

namespace hvd::cli {

void define_horovod_flags(CLI::App& app, Options& o);

// After parsing: horovodrun exports the autotune sub-flags only with --autotune and
// HOROVOD_TIMELINE_MARK_CYCLES only with a timeline file; without them they do nothing, which
// hvdrun says.
void finish_horovod_flags(Options& o);

}  // namespace hvd::cli
