#include "allreduce/api/status_error.h"

namespace hvd::runtime {

std::string full_message(const hvd::Error& e) {
  if (e.hint().empty()) return e.what();
  return std::string(e.what()) + "\n  hint: " + e.hint();
}

}  // namespace hvd::runtime
