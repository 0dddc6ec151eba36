#include "idx.h"

#include <zlib.h>

#include <filesystem>
#include <memory>

namespace fmnist {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

Gz open(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path +
                             " does not exist: install the Debian package "
                             "dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or "
                             "pass --data DIR");
  }
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error("cannot open " + path);
  return f;
}

void read_exact(gzFile f, void* out, std::size_t n, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const int chunk = static_cast<int>(std::min<std::size_t>(n, 1 << 30));
    const int got = gzread(f, p, static_cast<unsigned>(chunk));
    if (got <= 0) throw std::runtime_error(path + ": truncated or not gzip");
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

std::uint32_t read_be32(gzFile f, const std::string& path) {
  unsigned char b[4];
  read_exact(f, b, 4, path);
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         b[3];
}

}  // namespace

Dataset load(const std::string& dir, const std::string& prefix) {
  Dataset d;
  const std::string images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  {
    Gz f = open(images);
    if (read_be32(f.get(), images) != 0x803) throw std::runtime_error(images + ": not IDX images");
    const std::uint32_t count = read_be32(f.get(), images);
    d.rows = static_cast<int>(read_be32(f.get(), images));
    d.cols = static_cast<int>(read_be32(f.get(), images));
    if (count > 1000000 || d.rows != 28 || d.cols != 28) {
      throw std::runtime_error(images + ": unexpected dimensions");
    }
    std::vector<std::uint8_t> raw(static_cast<std::size_t>(count) * d.pixels());
    read_exact(f.get(), raw.data(), raw.size(), images);
    d.images.resize(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) d.images[i] = raw[i] / 255.0f;
    d.labels.resize(count);
  }
  Gz f = open(labels);
  if (read_be32(f.get(), labels) != 0x801) throw std::runtime_error(labels + ": not IDX labels");
  if (read_be32(f.get(), labels) != d.labels.size()) {
    throw std::runtime_error(labels + ": label count differs from " + images);
  }
  read_exact(f.get(), d.labels.data(), d.labels.size(), labels);
  for (std::uint8_t l : d.labels) {
    if (l > 9) throw std::runtime_error(labels + ": a label outside 0..9");
  }
  return d;
}

}  // namespace fmnist
