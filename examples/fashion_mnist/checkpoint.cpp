#include "checkpoint.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fmnist {
namespace {

constexpr char kMagic[8] = {'F', 'M', 'N', 'C', 'K', 'P', 'T', '1'};

std::vector<std::vector<float>*> state(Mlp& model) {
  std::vector<std::vector<float>*> out = model.params().tensors();
  for (std::vector<float>* v : model.velocity().tensors()) out.push_back(v);
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, int epochs_done, Mlp& model) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::int32_t epochs = epochs_done;
    out.write(kMagic, sizeof kMagic);
    out.write(reinterpret_cast<const char*>(&epochs), sizeof epochs);
    for (const std::vector<float>* t : state(model)) {
      const std::uint64_t n = t->size();
      out.write(reinterpret_cast<const char*>(&n), sizeof n);
      out.write(reinterpret_cast<const char*>(t->data()),
                static_cast<std::streamsize>(n * sizeof(float)));
    }
    if (!out.flush()) throw std::runtime_error("cannot write the checkpoint " + tmp);
  }
  std::filesystem::rename(tmp, path);  // atomic: a reader sees the old file or the new one
}

std::optional<int> load_checkpoint(const std::string& path, Mlp& model) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  char magic[sizeof kMagic] = {};
  std::int32_t epochs = 0;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(&epochs), sizeof epochs);
  if (!in || std::string(magic, sizeof magic) != std::string(kMagic, sizeof kMagic) || epochs < 0) {
    throw std::runtime_error(path + ": not a checkpoint of this example");
  }
  for (std::vector<float>* t : state(model)) {
    std::uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof n);
    if (!in || n != t->size()) {
      throw std::runtime_error(path + ": a checkpoint of another model (sizes differ)");
    }
    in.read(reinterpret_cast<char*>(t->data()), static_cast<std::streamsize>(n * sizeof(float)));
  }
  if (!in) throw std::runtime_error(path + ": the checkpoint is cut short");
  return epochs;
}

}  // namespace fmnist
