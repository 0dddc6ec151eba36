#include "common/spare_fd.h"

#include <fcntl.h>
#include <sys/socket.h>

namespace hvd {

SpareDescriptor::SpareDescriptor() : spare_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

bool SpareDescriptor::drop_pending(int listener) {
  spare_.reset();
  const bool dropped =
      UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)).valid();
  spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return dropped;
}

}  // namespace hvd
