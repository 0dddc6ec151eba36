// The Open MPI major version of the first mpirun on PATH, as hvdrun itself would find it (4 on
// Debian 12, 5 on Debian 13), for tests whose expected mpirun words differ between the two
// (launcher/mpirun/mpi_command.h, MpirunDialect). 0 when there is no runnable Open MPI mpirun.
#pragma once

#include <cstdio>
#include <regex>
#include <string>

namespace hvd::test {

inline int installed_open_mpi_major() {
  static const int major = [] {
    std::FILE* p = ::popen("mpirun --version 2>/dev/null", "r");
    if (p == nullptr) return 0;
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ::pclose(p);
    std::smatch m;
    static const std::regex kVersion(R"(\(Open MPI\) ([0-9]+)\.)");
    return std::regex_search(out, m, kVersion) ? std::stoi(m[1].str()) : 0;
  }();
  return major;
}

}  // namespace hvd::test
