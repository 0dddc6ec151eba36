// The ssh_config hvdrun resolves before it connects (ssh/config.h, apply_config): the input is
// the file given as --ssh-config, resolved for the host "h1" with a hostfile port and user
// absent. libssh parses the file; hvdrun reads back host, port, user, identities, known hosts
// and ProxyCommand. UsageError (a file libssh refuses) and hvd::Error (an option libssh rejects)
// are the documented refusals.
//
// Inputs that mention "exec" or "include" (any case, quotes ignored) are skipped: libssh runs
// `Match exec` commands through the shell at parse time, and an Include could read any file.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "ssh/config.h"
#include "ssh/session.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

bool mentions_unsafe_keyword(std::string_view text) {
  std::string folded;
  for (char c : text) {
    if (c != '"') folded += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return folded.find("exec") != std::string::npos || folded.find("include") != std::string::npos;
}

// One scratch file per process, removed at exit.
const std::string& scratch_path() {
  static const std::string path = [] {
    char name[] = "/tmp/hvd-fuzz-ssh-config-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) std::abort();
    ::close(fd);
    std::atexit([] { ::unlink(scratch_path().c_str()); });
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hvd::fuzz::as_text(data, size);
  if (mentions_unsafe_keyword(text)) return 0;
  const std::string& path = scratch_path();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) std::abort();
    std::fclose(f);
  }
  hvd::ssh::ensure_libssh_initialized();
  hvd::ssh::Session session = hvd::ssh::new_session();
  hvd::ssh::SshOptions options;
  options.config_file = path;
  options.known_hosts_file = "/dev/null";
  const hvd::ssh::SshTarget target{"h1", std::nullopt, std::nullopt};
  try {
    const hvd::ssh::ResolvedTarget r = hvd::ssh::apply_config(session, target, options);
    HVD_FUZZ_CHECK(r.host == "h1");
    HVD_FUZZ_CHECK(!r.identities.empty());
    HVD_FUZZ_CHECK(r.known_hosts == "/dev/null");
  } catch (const hvd::Error&) {
  }
  return 0;
}
