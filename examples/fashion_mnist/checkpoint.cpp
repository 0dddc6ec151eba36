#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

// Written as a careful program writes a file another run depends on: into a new file of its own
// beside FILE (mkstemp: a random name, created, never an existing file or a symbolic link someone
// planted), every write and the close checked, flushed to the disk (fsync) before the rename
// replaces FILE, then the folder flushed so that the rename itself survives a crash. A full disk
// or a crash leaves the last good checkpoint, never a truncated one.
void save_checkpoint(const std::string& path, int epochs_done, Mlp& model) {
  std::string bytes(kMagic, sizeof kMagic);
  const std::int32_t epochs = epochs_done;
  bytes.append(reinterpret_cast<const char*>(&epochs), sizeof epochs);
  for (const std::vector<float>* t : state(model)) {
    const std::uint64_t n = t->size();
    bytes.append(reinterpret_cast<const char*>(&n), sizeof n);
    bytes.append(reinterpret_cast<const char*>(t->data()), n * sizeof(float));
  }
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    throw std::runtime_error("cannot create a file beside the checkpoint " + path + ": " +
                             std::strerror(errno));
  }
  const auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write the checkpoint " + path + " (" + what + "): " + why);
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");  // atomic: old file or new
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
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
