#include "allreduce/api/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace hvd::runtime {

spdlog::logger& logger() {
  // Never destroyed: the engine may still log while static objects are torn down at exit
  // (a program that returns from main without hvd::shutdown()).
  static spdlog::logger* instance = [] {
    auto* l = new spdlog::logger("hvd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[hvd] %l: %v");
    l->set_level(spdlog::level::warn);
    return l;
  }();
  return *instance;
}

void configure_logger(int rank, const std::string& level) {
  logger().set_pattern(fmt::format("[hvd rank {}] %l: %v", rank));
  if (level == "fatal") {
    logger().set_level(spdlog::level::critical);
  } else if (level == "warning") {
    logger().set_level(spdlog::level::warn);
  } else {
    logger().set_level(spdlog::level::from_str(level));
  }
}

}  // namespace hvd::runtime
