// Eager allreduces (engine.h, cycle_engine.h): a small allreduce sent alone carries its input,
// and the ranks (in cycles) or rank 0 (here, the TCP engine) reduce the inputs with no collective.
// The TCP engine's part: rank 0 keeps every rank's input (note_eager), reduces them when the
// Controller decides the op alone (reduce_eager) and sends the result with the response, which
// the other ranks copy into their output (finish_eager).
#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/boundary.h"
#include "allreduce/api/status_error.h"
#include "allreduce/engine/engine.h"

namespace hvd::runtime {

void OpRunner::run_eager(detail::OpState& op, std::span<const std::string_view> /*inputs*/,
                         Timeline* /*timeline*/) {
  throw StatusError(HVD_ERR_INTERNAL,
                    fmt::format("allreduce '{}' cannot run from the ranks' gathered inputs here",
                                op.request.name));
}

void run_eager_op(OpRunner& runner, const std::shared_ptr<detail::OpState>& op,
                  std::span<const std::string_view> inputs, Timeline* timeline) {
  std::exception_ptr error;
  try {
    at_boundary([&] { runner.run_eager(*op, inputs, timeline); });
  } catch (...) {
    error = std::current_exception();
  }
  op->finish(error);
}

void Engine::note_eager(int from, const RequestList& list, std::string data) {
  if (!data.empty() && list.requests.size() == 1) {
    EagerInputs& in = eager_inputs_[list.requests.front().name];
    in.by_rank.resize(static_cast<std::size_t>(options_.size));
    std::string& mine = in.by_rank[static_cast<std::size_t>(from)];
    if (mine.empty()) ++in.have;
    mine = std::move(data);
    return;
  }
  for (const Request& q : list.requests) {
    auto it = eager_inputs_.find(q.name);
    if (it != eager_inputs_.end()) it->second.incomplete = true;
  }
}

std::string Engine::reduce_eager(Response& response) {
  if (!response.error.empty() || response.kind != OpKind::kAllreduce ||
      response.names.size() != 1) {
    return {};
  }
  auto it = eager_inputs_.find(response.names.front());
  if (it == eager_inputs_.end() || it->second.incomplete || it->second.have != options_.size) {
    return {};
  }
  std::vector<std::shared_ptr<detail::OpState>> ops = take_pending(response.names);
  if (ops.size() != 1) return {};  // execute() says what is wrong
  detail::OpState& op = *ops.front();
  const std::vector<std::string_view> inputs(it->second.by_rank.begin(), it->second.by_rank.end());
  std::string result;
  try {
    at_boundary([&] { runner_.run_eager(op, inputs, options_.timeline); });
    result.assign(static_cast<const char*>(op.output().data), op.output().byte_size());
  } catch (const std::exception& e) {
    // Every rank fails it with the same message (the response's error).
    response.error = e.what();
    op.finish(op_failure(HVD_ERR_INTERNAL, response.error));
    return {};
  }
  ++eager_;
  ++responses_;
  op.finish(nullptr);
  return result;
}

void Engine::finish_eager(const ResponseList& list, std::string_view result) {
  std::vector<std::shared_ptr<detail::OpState>> ops = take_pending(list.responses.front().names);
  if (ops.empty()) return;  // failed here already (a shutdown)
  detail::OpState& op = *ops.front();
  const Tensor& out = op.output();
  if (result.size() != out.byte_size()) {
    op.finish(
        op_failure(HVD_ERR_INTERNAL,
                   fmt::format("allreduce '{}': the coordinator sent {} bytes of result, not {}",
                               op.request.name, result.size(), out.byte_size())));
    return;
  }
  std::memcpy(out.data, result.data(), result.size());
  ++eager_;
  ++responses_;
  op.finish(nullptr);
}

}  // namespace hvd::runtime
