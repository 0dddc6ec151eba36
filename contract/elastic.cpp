#include "contract/elastic.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "common/error.h"

namespace hvd::contract {
namespace {

constexpr const char* kHint =
    "the elastic world document comes from hvdrun: run the same hvdrun version as libhvd";

bool has_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// Splits a line into words on single spaces (the encoder writes single spaces).
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    const std::size_t space = line.find(' ');
    out.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return out;
}

class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ContractError("elastic world document, line " + std::to_string(number_) + ": " + what,
                        kHint);
  }
  bool done() const { return text_.empty(); }
  // The next line's words; its first word must be `key`.
  std::vector<std::string_view> next(std::string_view key) {
    if (text_.empty()) {
      ++number_;
      fail("missing; expected '" + std::string(key) + "'");
    }
    const std::size_t nl = text_.find('\n');
    if (nl == std::string_view::npos) {
      ++number_;
      fail("no newline at its end");
    }
    line_ = text_.substr(0, nl);
    text_.remove_prefix(nl + 1);
    ++number_;
    std::vector<std::string_view> words = words_of(line_);
    if (words.empty() || words.front() != key) {
      fail("expected '" + std::string(key) + "', found '" + std::string(line_.substr(0, 40)) + "'");
    }
    return words;
  }
  std::string_view line() const { return line_; }
  int integer(std::string_view word, int min, int max, const char* what) const {
    int value = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (ec != std::errc() || end != word.data() + word.size() || value < min || value > max) {
      fail(std::string(what) + " '" + std::string(word) + "' is not a number from " +
           std::to_string(min) + " to " + std::to_string(max));
    }
    return value;
  }

 private:
  std::string_view text_;
  std::string_view line_;
  int number_ = 0;
};

void check_word_count(const Lines& lines, const std::vector<std::string_view>& words,
                      std::size_t n) {
  if (words.size() != n) {
    lines.fail("expected " + std::to_string(n) + " words, found " + std::to_string(words.size()));
  }
}

WorldEntry read_entry(Lines& lines, int size) {
  const auto w = lines.next("worker");
  // worker W rank R local L LS cross C CS host H
  check_word_count(lines, w, 12);
  if (w[2] != "rank" || w[4] != "local" || w[7] != "cross" || w[10] != "host") {
    lines.fail("expected 'worker W rank R local L LS cross C CS host H'");
  }
  WorldEntry e;
  e.worker = lines.integer(w[1], 0, 1 << 30, "the worker id");
  e.topology.size = size;
  e.topology.rank = lines.integer(w[3], 0, size - 1, "the rank");
  e.topology.local_size = lines.integer(w[6], 1, size, "the local size");
  e.topology.local_rank = lines.integer(w[5], 0, e.topology.local_size - 1, "the local rank");
  e.topology.cross_size = lines.integer(w[9], 1, size, "the cross size");
  e.topology.cross_rank = lines.integer(w[8], 0, e.topology.cross_size - 1, "the cross rank");
  e.host = std::string(w[11]);
  if (e.host.empty()) lines.fail("an empty host");
  if (has_space(e.host)) lines.fail("a host with whitespace in it");
  return e;
}

}  // namespace

const WorldEntry* WorldDoc::find_worker(int worker) const {
  const auto it = std::find_if(workers.begin(), workers.end(),
                               [&](const WorldEntry& e) { return e.worker == worker; });
  return it == workers.end() ? nullptr : &*it;
}

std::string encode_world(const WorldDoc& doc) {
  std::ostringstream out;
  std::string reason = doc.reason;
  std::replace_if(
      reason.begin(), reason.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  if (doc.master_addr.empty() || has_space(doc.master_addr)) {
    throw ContractError("elastic world: master address '" + doc.master_addr + "' is not one word",
                        "this is a bug in hvdrun: please report it");
  }
  out << "hvd-world " << kWorldFormat << "\ngeneration " << doc.generation << "\nreason " << reason
      << "\nmaster " << doc.master_addr << ' ' << doc.master_port << "\nsync_root " << doc.sync_root
      << "\nsize " << doc.size() << '\n';
  for (std::size_t r = 0; r < doc.workers.size(); ++r) {
    const WorldEntry& e = doc.workers[r];
    if (e.topology.rank != static_cast<int>(r) || e.host.empty() || has_space(e.host)) {
      throw ContractError("elastic world: worker " + std::to_string(e.worker) +
                              " is out of rank order or has a host that is not one word",
                          "this is a bug in hvdrun: please report it");
    }
    const RankTopology& t = e.topology;
    out << "worker " << e.worker << " rank " << t.rank << " local " << t.local_rank << ' '
        << t.local_size << " cross " << t.cross_rank << ' ' << t.cross_size << " host " << e.host
        << '\n';
  }
  return out.str();
}

WorldDoc decode_world(std::string_view text) {
  if (text.size() > kMaxWorldBytes) {
    throw ContractError("elastic world document: " + std::to_string(text.size()) +
                            " bytes, more than the limit of " + std::to_string(kMaxWorldBytes),
                        kHint);
  }
  Lines lines(text);
  WorldDoc doc;
  auto header = lines.next("hvd-world");
  check_word_count(lines, header, 2);
  if (header[1] != std::to_string(kWorldFormat)) {
    lines.fail("format " + std::string(header[1]) + ", this libhvd reads format " +
               std::to_string(kWorldFormat));
  }
  auto g = lines.next("generation");
  check_word_count(lines, g, 2);
  doc.generation = lines.integer(g[1], 0, 1 << 30, "the generation");
  lines.next("reason");
  doc.reason = std::string(lines.line().substr(std::min<std::size_t>(7, lines.line().size())));
  auto m = lines.next("master");
  check_word_count(lines, m, 3);
  doc.master_addr = std::string(m[1]);
  if (doc.master_addr.empty()) lines.fail("an empty master address");
  // Words split on ' ' only; a tab or CR inside one is refused here as encode_world() refuses it.
  if (has_space(doc.master_addr)) lines.fail("a master address with whitespace in it");
  doc.master_port = lines.integer(m[2], 0, 65535, "the master port");
  auto s = lines.next("sync_root");
  check_word_count(lines, s, 2);
  const std::string_view sync_root = s[1];
  auto z = lines.next("size");
  check_word_count(lines, z, 2);
  const int size = lines.integer(z[1], 1, kMaxWorldSize, "the size");
  doc.sync_root = lines.integer(sync_root, 0, size - 1, "the sync root");
  for (int r = 0; r < size; ++r) {
    WorldEntry e = read_entry(lines, size);
    if (e.topology.rank != r) {
      lines.fail("rank " + std::to_string(e.topology.rank) + " where rank " + std::to_string(r) +
                 " was expected (ranks in order, each once)");
    }
    if (doc.find_worker(e.worker) != nullptr) {
      lines.fail("worker " + std::to_string(e.worker) + " appears twice");
    }
    doc.workers.push_back(std::move(e));
  }
  if (!lines.done()) lines.next("end of the document");  // fails: more lines than `size` says
  return doc;
}

std::string world_key(int generation) { return "world." + std::to_string(generation); }

std::string elastic_scope(std::string_view job_id) { return std::string(job_id) + ".elastic"; }

std::string generation_scope(std::string_view job_id, int generation) {
  return std::string(job_id) + ".gen" + std::to_string(generation);
}

}  // namespace hvd::contract
