// What is generated from hvdrun's option table at build time (hvdrun-docgen, cli/CMakeLists.txt),
// so that it cannot drift from --help: the man page hvdrun(1) and the bash and zsh completions.
#pragma once

#include <string>
#include <vector>

namespace hvd::cli {

// One option as --help shows it (hidden options are left out).
struct OptionDoc {
  std::vector<std::string> names;  // "-H", "--hosts"; horovodrun's single-dash spellings too
  std::string value;               // "LIST", "MIN MAX", "auto|ssh|srun"; empty for a flag
  int values = 0;                  // words that follow the option (0 for a flag)
  std::string description;
};

std::vector<OptionDoc> option_docs();

// What completes an option's value: "file", "dir", a word list ("trace debug ..."), or "" (no
// completion: a number, a host list).
std::string value_completion(const OptionDoc& option);

std::string man_page(const std::string& version);  // roff, for man(1)
std::string bash_completion();                     // for bash-completion's completions/ folder
std::string zsh_completion();                      // _hvdrun, for zsh's fpath

}  // namespace hvd::cli
