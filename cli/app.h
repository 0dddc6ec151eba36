// hvdrun's top level: parse, then run, then an exit code (docs/exit-codes.md).
#pragma once

namespace hvd::cli {

// Never throws: every error becomes a message on stderr and an exit code.
int run(int argc, char** argv);

}  // namespace hvd::cli
