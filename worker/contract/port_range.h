// "LOW-HIGH" TCP port ranges: hvdrun's --port-range and the HVD_PORT_RANGE it passes to libhvd
// are read by this one parser, so both ends agree on what a range is.
#pragma once

#include <optional>
#include <string_view>
#include <utility>

namespace hvd::contract {

// {LOW, HIGH} for "LOW-HIGH" with 1 <= LOW <= HIGH <= 65535; nullopt for anything else.
std::optional<std::pair<int, int>> parse_port_range(std::string_view text);

}  // namespace hvd::contract
