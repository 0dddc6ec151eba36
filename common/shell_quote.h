// All shell quoting in hvdrun goes through here (STYLE.md, after Bear): commands shown to users
// and, later, the few words hvdrun sends to a remote shell. POSIX sh rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvd {

// One word for a POSIX shell: unchanged if it has only safe characters
// ([A-Za-z0-9_./:=@%+,-], not empty), otherwise in single quotes with each ' written as '\''.
// Any byte string, newlines and non-UTF-8 included, survives `sh -c` as exactly one argument.
std::string shell_quote(std::string_view word);

// The words quoted and joined by single spaces.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace hvd
