// `hvdrun --check-build [--json]`: what this build supports and what works on this host now.
// Build-time facts come from the generated build_config.h; run-time facts from `mpirun
// --version` and from libhvd itself, which hvdrun loads with dlopen (the CLI never links the
// runtime) and asks through hvd_build_report(): the MPI library, Gloo, the NCCL plugin and the
// NCCL version it loaded, the CUDA runtime, and the visible GPUs (none, with the reason); and
// the Python binding: whether `import hvd.torch` works in the Python it was built for (and in
// the python3 on PATH, when that is another one), with torch's version.
#pragma once

namespace hvd::cli {

// Prints the report (human on stdout, or one JSON document with `json`). Returns the exit
// code: 0 when the report is complete, 70 when libhvd could not be loaded.
int check_build(bool json);

}  // namespace hvd::cli
