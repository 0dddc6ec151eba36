#include "allreduce/api/status_error.h"

#include "hvd/hvd.hpp"

namespace hvd {

// The public exception's constructor lives with the errors (not with the API) so that the engine,
// compiled into the unit tests too, has it.
RuntimeError::RuntimeError(hvd_status status, const std::string& message)
    : std::runtime_error(message), status_(status) {}

}  // namespace hvd

namespace hvd::runtime {

std::string full_message(const hvd::Error& e) {
  if (e.hint().empty()) return e.what();
  return std::string(e.what()) + "\n  hint: " + e.hint();
}

}  // namespace hvd::runtime
