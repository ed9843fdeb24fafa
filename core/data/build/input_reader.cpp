// Streams builder input in bounded chunks (see input_reader.hpp).
#include "core/data/build/input_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/data/format.hpp"

namespace cohort::core::data {
namespace fs = std::filesystem;

namespace {

bool has_ext(const fs::path& p, input_kind kind) {
  const auto ext = p.extension().string();
  return kind == input_kind::text ? ext == ".txt" : (ext == ".jsonl" || ext == ".json");
}

}  // namespace

input_kind input_kind_of(const std::string& path, input_kind fallback) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fallback;
  const auto ext = fs::path(path).extension().string();
  return (ext == ".jsonl" || ext == ".json") ? input_kind::jsonl : input_kind::text;
}

std::vector<input_file> list_inputs(const std::string& path, input_kind kind) {
  std::error_code ec;
  std::vector<input_file> out;
  if (fs::is_regular_file(path, ec)) {
    out.push_back({path, fs::file_size(path, ec)});
    return out;
  }
  if (!fs::is_directory(path, ec)) throw data_error("--input " + path + ": no such file or directory");
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file() && has_ext(it->path(), kind)) out.push_back({it->path().string(), it->file_size()});
  }
  if (ec) throw data_error("--input " + path + ": cannot list directory: " + ec.message());
  std::sort(out.begin(), out.end(), [](const input_file& a, const input_file& b) { return a.path < b.path; });
  if (out.empty())
    throw data_error("--input " + path + ": directory holds no " +
                     std::string(kind == input_kind::text ? "*.txt" : "*.jsonl / *.json") + " files");
  return out;
}

chunk_reader::chunk_reader(std::vector<input_file> files, input_kind kind, std::size_t chunk_bytes)
    : files_(std::move(files)), kind_(kind), chunk_bytes_(chunk_bytes) {}

bool chunk_reader::open_next_file() {
  if (file_index_ >= files_.size()) return false;
  const auto& path = files_[file_index_].path;
  file_.reset(std::fopen(path.c_str(), "rb"));
  if (!file_) throw data_error(path + ": cannot open: " + std::strerror(errno));
  file_open_ = true;
  carry_.clear();
  eof_ = false;
  line_ = 0;
  return true;
}

bool chunk_reader::next(raw_chunk& out) {
  out.records.clear();
  out.bytes = 0;
  out.seq = seq_;
  while (out.bytes < chunk_bytes_) {
    if (!file_open_ && !open_next_file()) break;
    const bool more = kind_ == input_kind::text ? read_text(out) : read_jsonl(out);
    if (!more) {
      file_.reset();
      file_open_ = false;
      ++file_index_;
    }
  }
  if (out.records.empty() && out.bytes == 0) return false;
  ++seq_;
  return true;
}

// Reads up to chunk_bytes of the current text file into one record cut after a newline (or, in a
// file without newlines, at a UTF-8 character boundary). Returns false once the file is done.
bool chunk_reader::read_text(raw_chunk& out) {
  const auto& path = files_[file_index_].path;
  while (!eof_ && carry_.size() < chunk_bytes_) {
    const std::size_t old = carry_.size();
    carry_.resize(old + chunk_bytes_);
    const std::size_t n = std::fread(carry_.data() + old, 1, chunk_bytes_, file_.get());
    carry_.resize(old + n);
    if (n < chunk_bytes_) {
      if (std::ferror(file_.get())) throw data_error(path + ": read error");
      eof_ = true;
    }
  }
  raw_record rec;
  rec.file = static_cast<std::uint32_t>(file_index_);
  if (eof_ && carry_.size() <= chunk_bytes_) {
    rec.text = std::move(carry_);
    carry_.clear();
    rec.doc_end = true;
  } else {
    std::size_t cut = carry_.rfind('\n', chunk_bytes_ - 1);
    if (cut == std::string::npos) {
      cut = chunk_bytes_;
      while (cut > 1 && (static_cast<unsigned char>(carry_[cut]) & 0xC0) == 0x80) --cut;
    } else {
      ++cut;
    }
    rec.text = carry_.substr(0, cut);
    carry_.erase(0, cut);
  }
  out.bytes += rec.text.size();
  const bool done = rec.doc_end;
  if (!rec.text.empty() || rec.doc_end) out.records.push_back(std::move(rec));
  return !done;
}

bool chunk_reader::read_jsonl(raw_chunk& out) {
  const auto& path = files_[file_index_].path;
  std::string line;
  char buf[1 << 16];
  while (out.bytes < chunk_bytes_) {
    line.clear();
    bool got = false;
    while (std::fgets(buf, sizeof buf, file_.get()) != nullptr) {
      got = true;
      line += buf;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (!got) {
      if (std::ferror(file_.get())) throw data_error(path + ": read error");
      return false;
    }
    ++line_;
    out.bytes += line.size();
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are skipped
    raw_record rec;
    rec.text = line;
    rec.file = static_cast<std::uint32_t>(file_index_);
    rec.line = line_;
    rec.doc_end = true;
    out.records.push_back(std::move(rec));
  }
  return true;
}

}  // namespace cohort::core::data
