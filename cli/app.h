// hvdrun's top level: parse, then run, then an exit code (docs/exit-codes.md).
#pragma once

namespace hvd::cli {

// The command line (the hidden modes --agent, --agent-connect and --rank-shim are main.cpp's).
// Never throws: every error becomes a message on stderr and an exit code.
int run(int argc, char** argv);

}  // namespace hvd::cli
