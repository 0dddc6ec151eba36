// What the modes of the libhvd_check rank program share (libhvd_check.cpp has the overview):
// typed test data read and written as double, deterministic inputs and expected results, and the
// check counters.
#pragma once

#include <hvd/hvd.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace libhvd_check {

using hvd::DataType;
using hvd::ReduceOp;

constexpr DataType kAllTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
constexpr DataType kMainTypes[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16,
                                   DataType::kBFloat16, DataType::kInt16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

inline int g_rank = 0, g_size = 1;
inline long g_checks = 0, g_failures = 0;

// Typed storage for any dtype, read and written as double.
struct Data {
  DataType dtype;
  std::vector<std::byte> bytes;
  Data(DataType t, std::size_t n) : dtype(t), bytes(n * hvd::element_size(t)) {}
  std::size_t size() const { return bytes.size() / hvd::element_size(dtype); }
  void* ptr() { return bytes.data(); }
  double get(std::size_t i) const { return get_from(bytes.data(), dtype, i); }
  void set(std::size_t i, double v) { set_in(bytes.data(), dtype, i, v); }

  static double get_from(const std::byte* p, DataType t, std::size_t i) {
    switch (t) {
      case DataType::kUInt8:
        return reinterpret_cast<const std::uint8_t*>(p)[i];
      case DataType::kInt8:
        return reinterpret_cast<const std::int8_t*>(p)[i];
      case DataType::kInt16:
        return reinterpret_cast<const std::int16_t*>(p)[i];
      case DataType::kInt32:
        return reinterpret_cast<const std::int32_t*>(p)[i];
      case DataType::kInt64:
        return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
      case DataType::kFloat16:
        return hvd::to_float(reinterpret_cast<const hvd::float16*>(p)[i]);
      case DataType::kBFloat16:
        return hvd::to_float(reinterpret_cast<const hvd::bfloat16*>(p)[i]);
      case DataType::kFloat32:
        return reinterpret_cast<const float*>(p)[i];
      case DataType::kFloat64:
        return reinterpret_cast<const double*>(p)[i];
    }
    return 0;
  }
  static void set_in(std::byte* p, DataType t, std::size_t i, double v) {
    switch (t) {
      case DataType::kUInt8:
        reinterpret_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
        return;
      case DataType::kInt8:
        reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
        return;
      case DataType::kInt16:
        reinterpret_cast<std::int16_t*>(p)[i] = static_cast<std::int16_t>(v);
        return;
      case DataType::kInt32:
        reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
        return;
      case DataType::kInt64:
        reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
        return;
      case DataType::kFloat16:
        reinterpret_cast<hvd::float16*>(p)[i] = hvd::float16_from(static_cast<float>(v));
        return;
      case DataType::kBFloat16:
        reinterpret_cast<hvd::bfloat16*>(p)[i] = hvd::bfloat16_from(static_cast<float>(v));
        return;
      case DataType::kFloat32:
        reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
        return;
      case DataType::kFloat64:
        reinterpret_cast<double*>(p)[i] = v;
        return;
    }
  }
  hvd::Tensor tensor(std::vector<std::int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<std::int64_t>(size())};
    return hvd::Tensor{ptr(), dtype, std::move(shape)};
  }
};

inline bool is_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

inline bool is_signed(DataType t) { return t != DataType::kUInt8; }

// Small integers, so that sums and products are exact in every type (int8 and bfloat16
// included) at up to 4 ranks: sums <= 24, products <= 16, min/max within [-4, 4].
inline double input(ReduceOp op, DataType t, int rank, std::size_t i) {
  switch (op) {
    case ReduceOp::kProduct:
      return 1.0 + static_cast<double>((i + static_cast<std::size_t>(rank)) % 2);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((i * 5 + static_cast<std::size_t>(rank) * 3) % 9) -
             (is_signed(t) ? 4.0 : 0.0);
    default:
      return static_cast<double>((i + 3 * static_cast<std::size_t>(rank)) % 7);
  }
}

inline double expected_reduction(ReduceOp op, DataType t, std::size_t i, double prescale = 1.0,
                                 double postscale = 1.0) {
  double acc = input(op, t, 0, i) * prescale;
  for (int r = 1; r < g_size; ++r) {
    const double v = input(op, t, r, i) * prescale;
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      default:
        acc += v;
    }
  }
  if (op == ReduceOp::kAverage) acc = is_float(t) ? acc / g_size : std::trunc(acc / g_size);
  return acc * postscale;
}

// Average and scaled results of 16-bit types carry rounding: a relative tolerance per type.
inline double tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 2e-3;
    case DataType::kBFloat16:
      return 1.6e-2;
    case DataType::kFloat32:
      return 1e-6;
    case DataType::kFloat64:
      return 1e-12;
    default:
      return 0;
  }
}

inline void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    if (g_failures <= 20) std::printf("rank %d: MISMATCH %s\n", g_rank, what.c_str());
  }
}

inline bool close_enough(double got, double want, DataType t) {
  return std::fabs(got - want) <= tolerance(t) * std::max(1.0, std::fabs(want));
}

// Checks every element; reports the first wrong one.
template <class Want>
inline void expect_elements(const Data& got, std::size_t n, Want want, const std::string& what) {
  if (got.size() != n) {
    expect(false,
           what + ": " + std::to_string(got.size()) + " elements, want " + std::to_string(n));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double w = want(i);
    if (!close_enough(got.get(i), w, got.dtype)) {
      expect(false, what + ": element " + std::to_string(i) + " is " + std::to_string(got.get(i)) +
                        ", want " + std::to_string(w));
      return;
    }
  }
  expect(true, what);
}

inline std::string name(DataType t) { return hvd::dtype_name(t); }
inline std::string name(ReduceOp op) { return hvd::op_name(op); }

// The engine, fault and GPU modes (libhvd_check_modes.cpp); each returns the exit status.
int async_ops();
int threaded_ops();
int delayed();
int mismatch(const std::string& field);
int stall(int seconds);
int cache_mode();  // libhvd_check_cache.cpp
int gpu_without_device();
int timeline(const std::string& dir);
int die(int victim, int signal);                 // SIGKILL or SIGSTOP
int process_sets_mode(const std::string& kind);  // libhvd_check_sets.cpp
int groups_mode();                               // libhvd_check_groups.cpp

}  // namespace libhvd_check
