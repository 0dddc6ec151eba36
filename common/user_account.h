// The account this process runs as (its effective user), from the password database. Thread-safe:
// getpwuid() returns a static buffer that concurrent SSH logins overwrote under each other
// (found by ThreadSanitizer); this uses getpwuid_r().
#pragma once

#include <optional>
#include <string>

namespace hvd {

struct UserAccount {
  std::string name;  // pw_name
  std::string home;  // pw_dir
};

// nullopt when the database has no entry for the effective user (a container's arbitrary uid).
std::optional<UserAccount> current_account();

}  // namespace hvd
