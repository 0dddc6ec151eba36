// "1 host", "3 hosts": a count and its noun, for messages (regular plurals only).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hvd {

inline std::string plural(std::size_t n, std::string_view word) {
  std::string out = std::to_string(n);
  out += ' ';
  out += word;
  if (n != 1) out += 's';
  return out;
}

}  // namespace hvd
