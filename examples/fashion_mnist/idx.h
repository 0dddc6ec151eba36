// Fashion-MNIST as Debian ships it (package dataset-fashion-mnist): gzipped IDX files under
// /usr/share/datasets/fashion-mnist. IDX: a big-endian magic (0x803 images, 0x801 labels), the
// dimensions, then unsigned bytes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fmnist {

inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  int rows = 0, cols = 0;
  std::vector<float> images;         // count x rows*cols, scaled to [0, 1]
  std::vector<std::uint8_t> labels;  // count, 0..9
  std::size_t count() const { return labels.size(); }
  std::size_t pixels() const { return static_cast<std::size_t>(rows) * cols; }
};

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and the labels file (prefix "train" or "t10k").
// Throws std::runtime_error naming the file and, when it is missing, the Debian package.
Dataset load(const std::string& dir, const std::string& prefix);

}  // namespace fmnist
