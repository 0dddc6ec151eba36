#include "common/error.h"

#include <utility>

namespace hvd {

Error::Error(const std::string& what, std::string hint)
    : std::runtime_error(what), hint_(std::move(hint)) {}

}  // namespace hvd
