#include "core/data/verify.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/data/checksum.hpp"
#include "core/data/format.hpp"
#include "core/data/mapped_file.hpp"

namespace cohort::core::data {
namespace {

// Size and checksum of one file; returns false (and records why) when it does not match.
bool check_file(const std::filesystem::path& path, const file_info& expected, std::vector<verify_problem>& problems) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    problems.push_back({path.string(), "missing or unreadable: " + ec.message()});
    return false;
  }
  if (size != expected.bytes) {
    problems.push_back({path.string(), std::to_string(size) + " bytes on disk, manifest says " +
                                           std::to_string(expected.bytes) +
                                           (size < expected.bytes ? " (truncated)" : " (wrong size)")});
    return false;
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    problems.push_back({path.string(), "cannot open for reading"});
    return false;
  }
  std::vector<unsigned char> buf(1 << 22);
  xxh64_stream h;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
  if (std::ferror(f.get())) {
    problems.push_back({path.string(), "read error"});
    return false;
  }
  if (h.hex_digest() != expected.xxh64) {
    problems.push_back({path.string(), "checksum mismatch: xxh64 " + h.hex_digest() + ", manifest says " +
                                           expected.xxh64 + " (corrupt)"});
    return false;
  }
  return true;
}

void check_index(const std::filesystem::path& path, const shard_info& s, std::vector<verify_problem>& problems) {
  mapped_file index(path.string());
  if (index.size() != static_cast<std::size_t>(s.samples + 1) * 8) {
    problems.push_back({path.string(), "size does not match the shard's " + std::to_string(s.samples) + " samples"});
    return;
  }
  const auto* off = reinterpret_cast<const std::uint64_t*>(index.data());
  if (off[0] != 0 || off[s.samples] != static_cast<std::uint64_t>(s.tokens)) {
    problems.push_back({path.string(), "offsets do not span the shard's tokens"});
    return;
  }
  for (std::int64_t i = 0; i < s.samples; ++i) {
    if (off[i + 1] < off[i]) {
      problems.push_back({path.string(), "offsets decrease at sample " + std::to_string(i)});
      return;
    }
  }
}

template <typename T>
void check_ids(const mapped_file& tokens, std::int64_t vocab, std::vector<verify_problem>& problems) {
  const auto* ids = reinterpret_cast<const T*>(tokens.data());
  const std::size_t n = tokens.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    if (static_cast<std::int64_t>(ids[i]) >= vocab) {
      problems.push_back({tokens.path(), "token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                                             " >= vocab_size " + std::to_string(vocab)});
      return;
    }
  }
}

}  // namespace

std::vector<verify_problem> verify_dataset(const std::string& dir,
                                           const std::function<void(const std::string&)>& on_file) {
  std::vector<verify_problem> problems;
  manifest m;
  try {
    m = read_manifest(dir);
  } catch (const data_error& e) {
    problems.push_back({(std::filesystem::path(dir) / manifest_name).string(), e.what()});
    return problems;
  }
  const std::filesystem::path root(dir);
  for (const auto& s : m.shards) {
    const auto tokens_path = root / (s.name + ".tokens");
    const auto index_path = root / (s.name + ".index");
    if (on_file) on_file(tokens_path.string());
    if (check_file(tokens_path, s.tokens_file, problems)) {
      if (m.token_bytes == 2) {
        check_ids<std::uint16_t>(mapped_file(tokens_path.string()), m.vocab_size, problems);
      } else {
        check_ids<std::uint32_t>(mapped_file(tokens_path.string()), m.vocab_size, problems);
      }
    }
    if (on_file) on_file(index_path.string());
    if (check_file(index_path, s.index_file, problems)) check_index(index_path, s, problems);
    if (s.mask_file) {
      const auto mask_path = root / (s.name + ".mask");
      if (on_file) on_file(mask_path.string());
      check_file(mask_path, *s.mask_file, problems);
    }
  }
  return problems;
}

}  // namespace cohort::core::data
