#include "cli/check_build.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/launch_setup.h"
#include "common/error.h"
#include "common/process.h"
#include "hvd/build_config.h"

namespace hvd::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Where libhvd may be: beside a build tree's hvdrun, in an install prefix, then the loader's
// own search path.
std::vector<std::string> libhvd_candidates() {
  std::vector<std::string> out;
  const fs::path exe_dir = fs::path(own_path()).parent_path();
  out.push_back((exe_dir / ".." / "allreduce" / "libhvd.so.0").lexically_normal().string());
  out.push_back((exe_dir / ".." / "lib" / "libhvd.so.0").lexically_normal().string());
  out.push_back(
      (exe_dir / ".." / "lib" / "x86_64-linux-gnu" / "libhvd.so.0").lexically_normal().string());
  out.push_back("libhvd.so.0");
  return out;
}

struct Libhvd {
  std::string path;
  json report;
  std::string error;
};

Libhvd load_libhvd() {
  Libhvd out;
  std::string tried;
  for (const std::string& candidate : libhvd_candidates()) {
    if (candidate.find('/') != std::string::npos && !fs::exists(candidate)) continue;
    void* handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      tried += fmt::format("\n  {}: {}", candidate, why != nullptr ? why : "?");
      continue;
    }
    using Report = size_t (*)(char*, size_t);
    auto report = reinterpret_cast<Report>(::dlsym(handle, "hvd_build_report"));
    if (report == nullptr) {
      tried += fmt::format("\n  {}: no hvd_build_report (an older libhvd?)", candidate);
      continue;
    }
    std::string text(report(nullptr, 0), '\0');
    report(text.data(), text.size());
    text.resize(text.find('\0'));
    out.path = candidate;
    out.report = json::parse(text, nullptr, false);
    if (out.report.is_discarded()) out.error = "libhvd's report is not JSON";
    return out;  // stays loaded: CUDA state makes unloading unsafe
  }
  out.error = "libhvd.so.0 was not found or could not be loaded:" +
              (tried.empty() ? std::string(" no candidate exists") : tried);
  return out;
}

// `mpirun --version`'s first line, or nullopt when mpirun cannot be run.
std::optional<std::string> mpirun_version() {
  ProcessSpec spec;
  spec.argv = {"mpirun", "--version"};
  spec.env = environ_strings();
  spec.lookup_in_our_path = true;
  const auto run = run_and_capture(spec);
  if (!run || run->status.code() != 0) return std::nullopt;
  std::string first = run->output.substr(0, run->output.find('\n'));
  while (!first.empty() && first.back() == '\r') first.pop_back();
  if (first.empty()) return std::nullopt;
  return first;
}

void print_human(const json& doc) {
  std::string out = fmt::format("hvdrun {} build check\n", HVD_VERSION_STRING);
  const json& modes = doc["launch_modes"];
  out += fmt::format("  native launch      yes\n  MPI mode (--mpi)   {}\n",
                     modes["mpi"]["available"].get<bool>()
                         ? fmt::format("yes: {}", modes["mpi"]["mpirun"].get<std::string>())
                         : "no: mpirun not found on PATH (install openmpi-bin)");
  const json& lib = doc["libhvd"];
  if (lib.contains("error")) {
    out += fmt::format("  libhvd             not loaded: {}\n", lib["error"].get<std::string>());
    std::fputs(out.c_str(), stdout);
    return;
  }
  const json& e = lib["engines"];
  out += fmt::format("  libhvd             {} ({})\n", lib["libhvd_version"].get<std::string>(),
                     lib["path"].get<std::string>());
  out += fmt::format("  MPI backend        {}\n",
                     e["mpi"]["built"].get<bool>()
                         ? "built: " + e["mpi"].value("library", std::string("?"))
                         : std::string("not built"));
  out += fmt::format("  Gloo backend       {}\n",
                     e["gloo"]["built"].get<bool>()
                         ? "built: Gloo " + e["gloo"].value("version", std::string("?"))
                         : std::string("not built"));
  const json& nccl = e["nccl"];
  std::string nccl_text;
  if (!nccl["built"].get<bool>()) {
    nccl_text = "not built";
  } else if (nccl["loaded"].get<bool>()) {
    nccl_text = fmt::format("built, loaded NCCL {} ({})", nccl["version"].get<std::string>(),
                            nccl["plugin"].get<std::string>());
  } else {
    nccl_text = "built, not loadable: " + nccl["error"].get<std::string>();
  }
  out += fmt::format("  NCCL plugin        {}\n", nccl_text);
  out += fmt::format("  CUDA runtime       {}\n", lib["cuda_runtime"].is_null()
                                                      ? std::string("none")
                                                      : lib["cuda_runtime"].get<std::string>());
  const json& gpus = lib["gpus"];
  out +=
      fmt::format("  GPUs visible       {}{}\n", gpus["count"].get<int>(),
                  gpus.contains("reason") ? fmt::format(" ({})", gpus["reason"].get<std::string>())
                                          : std::string());
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int check_build(bool as_json) {
  json doc;
  doc["schema_version"] = 1;
  doc["hvdrun_version"] = HVD_VERSION_STRING;
  const auto mpirun = mpirun_version();
  doc["launch_modes"] = {
      {"native", true},
      {"mpi",
       {{"available", mpirun.has_value()}, {"mpirun", mpirun ? json(*mpirun) : json(nullptr)}}}};
  Libhvd lib = load_libhvd();
  if (lib.error.empty()) {
    json l{{"path", lib.path}};
    l.update(lib.report);
    doc["libhvd"] = l;
  } else {
    doc["libhvd"] = {{"error", lib.error}};
  }
  if (as_json) {
    const std::string text = doc.dump(2) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    print_human(doc);
  }
  return lib.error.empty() ? 0 : to_int(ExitCode::kInternal);
}

}  // namespace hvd::cli
