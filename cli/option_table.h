// Internal to cli/: hvdrun's option definitions, shared by the parser (options.cpp) and what is
// generated from them at build time, the man page and the shell completions (option_docs.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"

namespace hvd::cli {

// Adds every option to `app`, each writing into `o` when given.
void define_options(CLI::App& app, Options& o);

// The usage lines of --help, without "Usage: " ("hvdrun [OPTIONS] COMMAND [ARGS...]", ...).
std::vector<std::string> usage_lines();

// horovodrun's and mpirun's single-dash long spellings and the option each stands for
// ("-np", "--num-proc").
std::vector<std::pair<std::string, std::string>> single_dash_spellings();

}  // namespace hvd::cli
