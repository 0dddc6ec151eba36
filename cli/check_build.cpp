#include "cli/check_build.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/launch_setup.h"
#include "common/error.h"
#include "common/process.h"
#include "hvd/build_config.h"
#include "launcher/registry.h"

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

// The Python binding (horovodrun's --check-build lists its frameworks): does `import hvd.torch`
// work in the Python it was built for, and in the `python3` ranks get from PATH when that is
// another file? A build tree's binding is found through PYTHONPATH=<build>/python (as the tests
// use it); an installed one (python3-hvd) where that Python finds its packages.
constexpr const char* kPythonProbe = R"(import json, sys
r = {'python_version': sys.version.split()[0]}
try:
    import torch
    r['torch'] = torch.__version__
    import hvd.torch
    r['module'] = hvd.torch.__file__
except BaseException as e:
    r['error'] = f'{type(e).__name__}: {e}'.splitlines()[0]
print(json.dumps(r))
)";

json probe_python(const std::string& python, const std::string& build_tree_dir) {
  json out{{"python", python}};
  ProcessSpec spec;
  spec.argv = {"timeout", "60", python, "-c", kPythonProbe};
  spec.env.clear();
  for (std::string& var : environ_strings()) {
    if (!build_tree_dir.empty() && var.rfind("PYTHONPATH=", 0) == 0) continue;
    spec.env.push_back(std::move(var));
  }
  if (!build_tree_dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    spec.env.push_back("PYTHONPATH=" + build_tree_dir +
                       (old != nullptr && *old != '\0' ? ":" + std::string(old) : ""));
    out["pythonpath"] = build_tree_dir;
  }
  spec.lookup_in_our_path = true;
  const auto run = run_and_capture(spec);
  if (!run) {
    out["importable"] = false;
    out["error"] = "could not start it";
    return out;
  }
  // The probe's JSON is its last line starting with '{' (torch may warn on stderr before it).
  json reply;
  std::istringstream lines(run->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind('{', 0) == 0) reply = json::parse(line, nullptr, false);
  }
  if (!reply.is_object()) {
    out["importable"] = false;
    std::string said = run->output.substr(0, run->output.find('\n'));
    out["error"] = run->status.code() == 124
                       ? std::string("timed out after 60 s")
                       : fmt::format("exit {}{}", run->status.code(),
                                     said.empty() ? std::string() : ": " + said);
    return out;
  }
  out["importable"] = reply.contains("module");
  for (const char* key : {"python_version", "torch", "module", "error"}) {
    if (reply.contains(key)) out[key] = reply[key];
  }
  return out;
}

json python_binding() {
  json out;
  const std::string built_for = HVD_BUILD_PYTHON;
  out["built"] = !built_for.empty();
  if (built_for.empty()) return out;
  // A build tree: <build>/cli/hvdrun beside <build>/python/hvd/_native*.so.
  std::string build_tree_dir;
  const fs::path tree = (fs::path(own_path()).parent_path() / ".." / "python").lexically_normal();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tree / "hvd", ec)) {
    if (entry.path().filename().string().rfind("_native", 0) == 0) build_tree_dir = tree.string();
  }
  out["interpreters"] = json::array({probe_python(built_for, build_tree_dir)});
  // A virtual environment's python3 is a symbolic link to its base interpreter but sees other
  // packages (the wheel's, docs/pytorch.md): another interpreter for this check.
  auto in_venv = [&](const std::string& python) {
    return fs::exists(fs::path(python).parent_path().parent_path() / "pyvenv.cfg", ec);
  };
  const std::string on_path = path_of("python3");
  if (!on_path.empty() &&
      (fs::weakly_canonical(on_path, ec) != fs::weakly_canonical(built_for, ec) ||
       in_venv(on_path) != in_venv(built_for))) {
    json other = probe_python(on_path, build_tree_dir);
    other["on_path"] = true;
    out["interpreters"].push_back(other);
  }
  return out;
}

std::string python_line(const json& p) {
  if (p["importable"].get<bool>()) {
    return fmt::format("{}: importable (Python {}, torch {}, {}{})", p["python"].get<std::string>(),
                       p.value("python_version", std::string("?")),
                       p.value("torch", std::string("?")), p["module"].get<std::string>(),
                       p.contains("pythonpath")
                           ? fmt::format("; PYTHONPATH={}", p["pythonpath"].get<std::string>())
                           : std::string());
  }
  return fmt::format("{}: not importable: {}", p["python"].get<std::string>(),
                     p.value("error", std::string("?")));
}

void print_human(const json& doc) {
  std::string out = fmt::format("hvdrun {} build check\n", HVD_VERSION_STRING);
  // Each launcher's row, as the registry lists them (launcher/registry.cpp).
  const json& modes = doc["launch_modes"];
  for (const launcher::LauncherEntry& e : launcher::launchers()) {
    const launcher::LauncherCheck& c = e.check_build;
    const json& mode = modes[std::string(c.key)];
    const std::string row =
        !mode.is_object() ? "yes"
        : mode["available"].get<bool>()
            ? fmt::format("yes: {}", mode[std::string(c.probe_key)].get<std::string>())
            : fmt::format("no: {}", c.missing);
    out += fmt::format("  {:<19}{}\n", c.label, row);
  }
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
  const json& py = doc["python_binding"];
  if (!py["built"].get<bool>()) {
    out += "  Python binding     not built (needs python3-dev and pybind11-dev at build time)\n";
  } else {
    for (const json& p : py["interpreters"]) {
      out += fmt::format("  {}{}\n",
                         p.contains("on_path") ? "python3 on PATH    " : "Python binding     ",
                         python_line(p));
      if (p.contains("on_path") && !p["importable"].get<bool>()) {
        out += fmt::format(
            "                     ranks started as `python3 ...` get this one: "
            "name {} in the command\n",
            py["interpreters"][0]["python"].get<std::string>());
      }
    }
  }
  std::fputs(out.c_str(), stdout);
}

}  // namespace

int check_build(bool as_json) {
  json doc;
  doc["schema_version"] = 1;
  doc["hvdrun_version"] = HVD_VERSION_STRING;
  // Each launcher: true, or what its probe found ({"available": ..., "mpirun": "..."}).
  json modes = json::object();
  for (const launcher::LauncherEntry& e : launcher::launchers()) {
    const launcher::LauncherCheck& c = e.check_build;
    if (c.probe == nullptr) {
      modes[std::string(c.key)] = true;
      continue;
    }
    const std::optional<std::string> found = c.probe();
    modes[std::string(c.key)] = {{"available", found.has_value()},
                                 {std::string(c.probe_key), found ? json(*found) : json(nullptr)}};
  }
  doc["launch_modes"] = std::move(modes);
  Libhvd lib = load_libhvd();
  if (lib.error.empty()) {
    json l{{"path", lib.path}};
    l.update(lib.report);
    doc["libhvd"] = l;
  } else {
    doc["libhvd"] = {{"error", lib.error}};
  }
  doc["python_binding"] = python_binding();
  if (as_json) {
    const std::string text = doc.dump(2) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    print_human(doc);
  }
  return lib.error.empty() ? 0 : to_int(ExitCode::kInternal);
}

}  // namespace hvd::cli
