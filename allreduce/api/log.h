// libhvd's logger: stderr, "[hvd rank R] level: message", level from HOROVOD_LOG_LEVEL.
// Not registered in spdlog's global registry, so it never clashes with the program's own spdlog.
#pragma once

#include <spdlog/logger.h>

#include <string>

namespace hvd::runtime {

spdlog::logger& logger();

// Sets the rank shown in each line and the level ("trace" ... "fatal").
void configure_logger(int rank, const std::string& level);

}  // namespace hvd::runtime
