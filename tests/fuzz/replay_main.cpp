// Replays inputs through one harness without libFuzzer (the normal build, g++): every regular
// file of each directory argument (sorted, so a run is reproducible), or each file argument. A
// harness aborts on a broken property and lets an unexpected exception escape; either ends this
// program abnormally after it has named the input on stderr.
#include <algorithm>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/fuzz/fuzz_support.h"

namespace {

namespace fs = std::filesystem;

// The input being replayed, for the crash message (written from a signal handler).
char current_input[4096] = "";

void name_input_and_die(int sig) {
  const char prefix[] = "fuzz replay: crashed on input ";
  (void)!::write(2, prefix, sizeof prefix - 1);
  (void)!::write(2, current_input, std::strlen(current_input));
  (void)!::write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::vector<fs::path> inputs_of(const fs::path& arg) {
  std::vector<fs::path> out;
  if (fs::is_directory(arg)) {
    for (const auto& entry : fs::directory_iterator(arg)) {
      if (entry.is_regular_file()) out.push_back(entry.path());
    }
    std::sort(out.begin(), out.end());
  } else {
    out.push_back(arg);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " DIR_OR_FILE...\n";
    return 2;
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, name_input_and_die);
  std::set_terminate([] {
    std::cerr << "fuzz replay: an exception the harness does not expect escaped";
    try {
      if (const auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      std::cerr << ": " << e.what();
    } catch (...) {
    }
    std::cerr << "\n";
    std::abort();
  });
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::exists(argv[i])) continue;  // a harness without regressions yet
    for (const fs::path& path : inputs_of(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::cerr << "fuzz replay: cannot read " << path << "\n";
        return 1;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      std::strncpy(current_input, path.c_str(), sizeof current_input - 1);
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::cerr << "fuzz replay: no inputs found\n";
    return 1;
  }
  std::cout << "fuzz replay: " << replayed << " inputs, no failure\n";
  return 0;
}
