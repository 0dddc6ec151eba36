#include "common/user_account.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace hvd {

std::optional<UserAccount> current_account() {
  const long suggested = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(suggested > 0 ? static_cast<size_t>(suggested) : 16384);
  for (int tries = 0; tries < 8; ++tries) {
    passwd entry{};
    passwd* found = nullptr;
    const int rc = ::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE) {  // an entry larger than the buffer: try a bigger one
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (rc != 0 || found == nullptr) return std::nullopt;
    return UserAccount{found->pw_name != nullptr ? found->pw_name : "",
                       found->pw_dir != nullptr ? found->pw_dir : ""};
  }
  return std::nullopt;
}

}  // namespace hvd
