// Safetensors reading with every header field checked against the file, and writing.
#include "core/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t max_header_bytes = 100'000'000;  // the safetensors library's own limit

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw model_error(model_errc::bad_safetensors, path + ": " + what);
}

tensor_entry parse_entry(const std::string& path, const std::string& name, const json& v,
                         std::uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!v.is_object()) fail(path, where + "header entry is not an object");
  tensor_entry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail(path, where + "missing string field 'dtype'");
  e.dtype = dt->get<std::string>();
  const std::size_t elem = safetensors_dtype_size(e.dtype);
  if (elem == 0) {
    fail(path, where + "unknown dtype '" + e.dtype +
                   "' (known: F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, "
                   "F8_E4M3, F8_E5M2)");
  }
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail(path, where + "missing list field 'shape'");
  std::uint64_t count = 1;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned()) fail(path, where + "shape entries must be non-negative integers");
    const auto x = d.get<std::uint64_t>();
    if (x != 0 && count > std::numeric_limits<std::uint64_t>::max() / x / elem) {
      fail(path, where + "shape is too large");
    }
    count *= x;
    e.shape.push_back(static_cast<std::int64_t>(x));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    fail(path, where + "'data_offsets' must be a list of two non-negative integers");
  }
  e.begin = (*off)[0].get<std::uint64_t>();
  e.end = (*off)[1].get<std::uint64_t>();
  if (e.begin > e.end) fail(path, where + "data_offsets begin after they end");
  if (e.end > data_size) {
    fail(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   ") run past the data section of " + std::to_string(data_size) +
                   " bytes (a truncated file?)");
  }
  if (e.nbytes() != count * elem) {
    fail(path, where + "holds " + std::to_string(e.nbytes()) + " bytes but shape and dtype " +
                   e.dtype + " need " + std::to_string(count * elem));
  }
  return e;
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

safetensors_reader::safetensors_reader(const std::string& path)
    : safetensors_reader(open_local_weight_file(path)) {}

safetensors_reader::safetensors_reader(std::unique_ptr<weight_file> file) : file_(std::move(file)) {
  const std::string& path = file_->name();
  const std::uint64_t size = file_->size();
  unsigned char len_bytes[8];
  if (size < 8)
    fail(path, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  file_->read(0, 8, len_bytes);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n == 0 || n > max_header_bytes || n > size - 8) {
    fail(path, "bad header length " + std::to_string(n) + " (file is " + std::to_string(size) +
                   " bytes; the header must fit in it and be at most 100 MB)");
  }
  std::string header(n, '\0');
  file_->read(8, n, header.data());
  json j = json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, "header is not a JSON object");
  data_start_ = 8 + n;
  const std::uint64_t data_size = size - data_start_;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, "__metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(path, "__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_entry(path, it.key(), *it, data_size));
  }
  std::vector<const tensor_entry*> by_offset;
  for (const auto& e : tensors_) {
    if (e.nbytes() > 0) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const tensor_entry* a, const tensor_entry* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      fail(path, "tensor '" + by_offset[i]->name + "' overlaps tensor '" + by_offset[i - 1]->name +
                     "' in the data section");
    }
  }
}

safetensors_reader::~safetensors_reader() = default;

const tensor_entry* safetensors_reader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const tensor_entry& e, const std::string& n) { return e.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const tensor_entry& safetensors_reader::at(const std::string& name) const {
  const tensor_entry* e = find(name);
  if (!e) throw model_error(model_errc::bad_weights, path() + ": missing tensor '" + name + "'");
  return *e;
}

void safetensors_reader::read(const tensor_entry& e, void* dst) const {
  file_->read(data_start_ + e.begin, e.nbytes(), dst);
}

void safetensors_reader::read_range(const tensor_entry& e, std::uint64_t offset,
                                    std::uint64_t length, void* dst) const {
  if (offset > e.nbytes() || length > e.nbytes() - offset) {
    throw model_error(model_errc::bad_input, path() + ": byte range [" + std::to_string(offset) + ", +" +
                                                 std::to_string(length) + ") runs past tensor '" + e.name +
                                                 "' of " + std::to_string(e.nbytes()) + " bytes");
  }
  file_->read(data_start_ + e.begin + offset, length, dst);
}

safetensors_writer::safetensors_writer(std::string path, const std::vector<tensor_header>& tensors,
                                       const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) {
      throw model_error(model_errc::bad_input, path_ + ": tensor '" + t.name + "' given twice");
    }
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data_bytes_, data_bytes_ + t.nbytes}}};
    data_bytes_ += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  header_bytes_ = text.size();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw model_error(model_errc::io, tmp_ + ": cannot create: " + std::strerror(errno));
  try {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header_bytes_ >> (8 * i));
    write_all(len, 8);
    write_all(text.data(), text.size());
  } catch (...) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    throw;
  }
}

safetensors_writer::~safetensors_writer() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void safetensors_writer::write_all(const void* data, std::size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw model_error(model_errc::io, tmp_ + ": write failed (disk full?): " + std::strerror(errno));
    }
    p += n;
    nbytes -= static_cast<std::size_t>(n);
  }
}

void safetensors_writer::write(const void* data, std::size_t nbytes) {
  if (fd_ < 0) throw model_error(model_errc::bad_input, path_ + ": write after finish");
  if (nbytes > data_bytes_ - written_) {
    throw model_error(model_errc::bad_input,
                      path_ + ": " + std::to_string(written_ + nbytes) +
                          " data bytes given but the header announced " + std::to_string(data_bytes_));
  }
  write_all(data, nbytes);
  written_ += nbytes;
}

void safetensors_writer::finish() {
  if (fd_ < 0) throw model_error(model_errc::bad_input, path_ + ": finished twice");
  if (written_ != data_bytes_) {
    throw model_error(model_errc::bad_input,
                      path_ + ": only " + std::to_string(written_) + " of the " +
                          std::to_string(data_bytes_) + " announced data bytes were written");
  }
  if (::fsync(fd_) != 0) {
    throw model_error(model_errc::io, tmp_ + ": fsync failed: " + std::strerror(errno));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw model_error(model_errc::io, tmp_ + ": close failed: " + std::strerror(errno));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp_.c_str());
    throw model_error(model_errc::io, path_ + ": cannot rename from " + tmp_ + ": " + why);
  }
}

void write_safetensors(const std::string& path, const std::vector<tensor_blob>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<tensor_header> headers;
  headers.reserve(tensors.size());
  for (const auto& t : tensors) headers.push_back({t.name, t.dtype, t.shape, t.nbytes});
  safetensors_writer writer(path, headers, metadata);
  for (const auto& t : tensors) writer.write(t.data, t.nbytes);
  writer.finish();
}

}  // namespace cohort::core::model
