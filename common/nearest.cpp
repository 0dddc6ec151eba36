#include "common/nearest.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <vector>

namespace hvd {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  // One row of the table at a time: row[j] is the distance from a[0..i) to b[0..j).
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] =
          std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_name(std::string_view name,
                                        std::span<const std::string_view> candidates) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 4);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (std::string_view c : candidates) {
    const std::size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best_distance = d;
      best = std::string(c);
    }
  }
  return best;
}

}  // namespace hvd
