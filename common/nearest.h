// "Did you mean ...?": the known name nearest to a mistyped one, for error messages
// (--config-file keys, HOROVOD_* variables libhvd does not know).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hvd {

// Levenshtein distance (insertions, deletions, substitutions), ignoring ASCII case.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `name`, when it is at most max(2, name.size() / 4) edits away;
// ties go to the first candidate.
std::optional<std::string> nearest_name(std::string_view name,
                                        std::span<const std::string_view> candidates);

}  // namespace hvd
