// The API boundary: run a body, turn whatever it throws into hvd::RuntimeError with a status.
#pragma once

#include <new>

#include "allreduce/api/status_error.h"
#include "hvd/hvd.hpp"

namespace hvd::runtime {

template <class Body>
auto at_boundary(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const RuntimeError&) {
    throw;
  } catch (const StatusError& e) {
    throw RuntimeError(e.status(), full_message(e));
  } catch (const ContractError& e) {
    throw RuntimeError(HVD_ERR_CONFIG, full_message(e));
  } catch (const hvd::Error& e) {
    throw RuntimeError(HVD_ERR_INTERNAL, full_message(e));
  } catch (const std::bad_alloc&) {
    throw RuntimeError(HVD_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    throw RuntimeError(HVD_ERR_INTERNAL, std::string("unexpected error: ") + e.what());
  }
}

}  // namespace hvd::runtime
