// hvdrun-docgen DIR: writes hvdrun.1 (the man page), hvdrun.bash and _hvdrun (the bash and zsh
// completions) into DIR, from hvdrun's option table (cli/option_docs.h). Run by the build, not
// installed.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/option_docs.h"
#include "hvd/build_config.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hvdrun-docgen DIR\n");
    return 64;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::pair<const char*, std::string> files[] = {
      {"hvdrun.1", hvd::cli::man_page(HVD_VERSION_STRING)},
      {"hvdrun.bash", hvd::cli::bash_completion()},
      {"_hvdrun", hvd::cli::zsh_completion()},
  };
  for (const auto& [name, text] : files) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::fprintf(stderr, "hvdrun-docgen: cannot write %s\n", (dir / name).c_str());
      return 73;
    }
  }
  return 0;
}
