// libhvd's errors inside C++: hvd::Error (common/error.h) plus the hvd_status the public APIs
// report. The API boundary (api.cpp, c_api.cpp) turns any exception into RuntimeError / a status.
#pragma once

#include <string>

#include "common/error.h"
#include "hvd/hvd.h"

namespace hvd::runtime {

class StatusError : public hvd::Error {
 public:
  StatusError(hvd_status status, const std::string& what, std::string hint = {})
      : Error(what, std::move(hint)), status_(status) {}
  hvd_status status() const noexcept { return status_; }

 private:
  hvd_status status_;
};

// "what\n  hint: hint" (or just what): the one-message form of an hvd::Error.
std::string full_message(const hvd::Error& e);

}  // namespace hvd::runtime
