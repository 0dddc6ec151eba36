#include "common/shell_quote.h"

#include <algorithm>
#include <cctype>

namespace hvd {
namespace {

bool is_safe(char c) {
  if (std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80) {
    return true;
  }
  constexpr std::string_view kSafe = "_./:=@%+,-";
  return kSafe.find(c) != std::string_view::npos;
}

}  // namespace

std::string shell_quote(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), is_safe)) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace hvd
