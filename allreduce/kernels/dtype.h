// Element types: sizes, names and the 16-bit float conversions (hvd.hpp declares the public
// ones). Internal helpers live in hvd::runtime.
#pragma once

#include <cstddef>
#include <string>

#include "hvd/hvd.hpp"

namespace hvd::runtime {

// The highest hvd_dtype value (new types are appended): what a peer's message may carry.
inline constexpr int kMaxDtype = HVD_INT16;

bool is_floating(DataType dtype);
bool is_valid(DataType dtype);
bool is_valid(ReduceOp op);

// "float32 tensor of shape [2, 3]" for messages.
std::string describe(const Tensor& t);

}  // namespace hvd::runtime
