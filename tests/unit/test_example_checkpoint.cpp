// The training example's checkpoint (examples/fashion_mnist/checkpoint.h), issue 51 finding 13:
// it was written to a predictable FILE.tmp that followed a symbolic link, without an fsync
// before the rename, with unchecked errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include "tests/support/catch.h"

#include "examples/fashion_mnist/checkpoint.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct Dir {
  fs::path path = fs::temp_directory_path() / ("hvd-ckpt-" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("example checkpoint: a link planted beside it is not followed, a round trip works",
          "[example]") {
  Dir dir;
  const fs::path ckpt = dir.path / "ckpt";
  const fs::path victim = dir.path / "victim";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir.path / "ckpt.tmp");  // the name the old code wrote through
  fmnist::Mlp model(4, 3, 2);
  fmnist::save_checkpoint(ckpt.string(), 3, model);
  CHECK(slurp(victim) == "precious");
  fmnist::Mlp loaded(4, 3, 2);
  CHECK(fmnist::load_checkpoint(ckpt.string(), loaded) == 3);
  // Nothing but the checkpoint and what the test put there.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 3);
}

TEST_CASE("example checkpoint: a checkpoint that cannot be written says so", "[example]") {
  fmnist::Mlp model(4, 3, 2);
  CHECK_THROWS_WITH(fmnist::save_checkpoint("/nonexistent-hvd-folder/ckpt", 1, model),
                    Catch::Matchers::ContainsSubstring("cannot create a file beside the checkpoint "
                                                       "/nonexistent-hvd-folder/ckpt"));
}
