// Integrity checks of a dataset (see verify.hpp).
#include "core/data/verify.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>
#include <thread>

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
    problems.push_back({path.string(), "checksum mismatch: the manifest expects xxh64 " + expected.xxh64 +
                                           ", the file has " + h.hex_digest() + " (corrupt)"});
    return false;
  }
  return true;
}

// An index of `samples` samples over a stream of `tokens` tokens.
void check_index(const std::filesystem::path& path, std::int64_t samples, std::int64_t tokens,
                 std::vector<verify_problem>& problems) {
  mapped_file index(path.string());
  if (index.size() != static_cast<std::size_t>(samples + 1) * 8) {
    problems.push_back({path.string(), "size does not match the shard's " + std::to_string(samples) + " samples"});
    return;
  }
  const auto* off = reinterpret_cast<const std::uint64_t*>(index.data());
  if (off[0] != 0 || off[samples] != static_cast<std::uint64_t>(tokens)) {
    problems.push_back({path.string(), "offsets do not span the shard's tokens"});
    return;
  }
  for (std::int64_t i = 0; i < samples; ++i) {
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

checksum_summary verify_checksums(const std::string& dir, int threads) {
  const manifest m = read_manifest(dir);
  const std::filesystem::path root(dir);
  std::vector<std::pair<std::filesystem::path, const file_info*>> files;
  checksum_summary summary;
  for (const auto& s : m.shards)
    for (const auto& [name, info] : shard_files(s)) files.emplace_back(root / name, info);
  for (const auto& f : files) summary.bytes += f.second->bytes;
  summary.files = files.size();

  // Each worker takes the next unchecked file; problems land in the file's own slot, so the
  // report below does not depend on which thread finished first.
  std::vector<std::vector<verify_problem>> found(files.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < files.size();) {
      try {
        if (!check_file(files[i].first, *files[i].second, found[i])) failed = true;
      } catch (const std::exception& e) {
        found[i].push_back({files[i].first.string(), e.what()});
        failed = true;
      }
    }
  };
  const auto n = static_cast<std::size_t>(std::max(1, std::min<int>(threads, static_cast<int>(files.size()))));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < n; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) share the files
    }
  }
  work();
  for (auto& t : pool) t.join();
  if (failed) {
    for (const auto& slot : found) {
      if (slot.empty()) continue;
      throw data_error(slot.front().file + ": " + slot.front().message +
                       "; rebuild the data set or restore the file (`cohort-data verify " + dir +
                       "` lists every problem)");
    }
  }
  return summary;
}

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
  // One stream: its ids below vocab_size, its index monotone and spanning its tokens.
  const auto check_stream = [&](const std::string& base, const std::string& tokens_ext, const file_info& tokens_file,
                                const std::string& index_ext, const file_info& index_file, std::int64_t samples,
                                std::int64_t tokens) {
    const auto tokens_path = root / (base + tokens_ext);
    const auto index_path = root / (base + index_ext);
    if (on_file) on_file(tokens_path.string());
    if (check_file(tokens_path, tokens_file, problems)) {
      if (m.token_bytes == 2) {
        check_ids<std::uint16_t>(mapped_file(tokens_path.string()), m.vocab_size, problems);
      } else {
        check_ids<std::uint32_t>(mapped_file(tokens_path.string()), m.vocab_size, problems);
      }
    }
    if (on_file) on_file(index_path.string());
    if (check_file(index_path, index_file, problems)) check_index(index_path, samples, tokens, problems);
  };
  for (const auto& s : m.shards) {
    check_stream(s.name, ".tokens", s.tokens_file, ".index", s.index_file, s.samples, s.tokens);
    if (m.seq2seq)
      check_stream(s.name, ".target_tokens", *s.target_tokens_file, ".target_index", *s.target_index_file, s.samples,
                   s.target_tokens);
    if (s.mask_file) {
      const auto mask_path = root / (s.name + ".mask");
      if (on_file) on_file(mask_path.string());
      check_file(mask_path, *s.mask_file, problems);
    }
  }
  return problems;
}

}  // namespace cohort::core::data
