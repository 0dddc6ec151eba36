#include "allreduce/kernels/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allreduce/kernels/half.h"

namespace hvd {

// The conversions themselves are inline in half.h, where the kernels' loops use them too.
float to_float(float16 value) { return runtime::half_to_float(value); }
float16 float16_from(float value) { return runtime::half_from_float(value); }
float to_float(bfloat16 value) { return runtime::bf16_to_float(value); }
bfloat16 bfloat16_from(float value) { return runtime::bf16_from_float(value); }

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "invalid dtype";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "invalid op";
}

namespace runtime {

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool is_valid(DataType dtype) { return element_size(dtype) != 0; }

bool is_valid(ReduceOp op) {
  const int v = static_cast<int>(op);
  return v >= HVD_SUM && v <= HVD_PRODUCT;
}

std::string describe(const Tensor& t) {
  return fmt::format("{} tensor of shape [{}]{}", dtype_name(t.dtype), fmt::join(t.shape, ", "),
                     t.device.kind == Device::Kind::kCUDA
                         ? fmt::format(" on CUDA device {}", t.device.id)
                         : std::string());
}

}  // namespace runtime
}  // namespace hvd
