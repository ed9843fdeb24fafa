// The safetensors file format (8-byte little-endian header length, JSON header, raw data): a
// validating reader and a streaming writer. Works on raw bytes, no torch. A reader owns its
// weight_file (a local file read by pread, or an S3 object read by range), so several threads may
// read from one reader at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/weight_file.hpp"

namespace cohort::core::model {

struct tensor_entry {
  std::string name;
  std::string dtype;  // safetensors spelling: F32, F16, BF16, I64, ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
  std::uint64_t nbytes() const { return end - begin; }
};

// Bytes per element of a safetensors dtype, or 0 when the dtype is unknown.
std::size_t safetensors_dtype_size(const std::string& dtype);

class safetensors_reader {
 public:
  // Reads and validates the whole header (the 8-byte length, then the header: two reads), the
  // tensors' extents against the file's size. Throws model_error (bad_safetensors, or io when the
  // file cannot be opened or read) naming the file and, where one is at fault, the tensor.
  explicit safetensors_reader(std::unique_ptr<weight_file> file);
  explicit safetensors_reader(const std::string& path);  // a local file (open_local_weight_file)
  ~safetensors_reader();
  safetensors_reader(const safetensors_reader&) = delete;
  safetensors_reader& operator=(const safetensors_reader&) = delete;

  const std::string& path() const { return file_->name(); }              // the path, or the s3:// URL
  const std::vector<tensor_entry>& tensors() const { return tensors_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const tensor_entry* find(const std::string& name) const;
  // Throws model_error (bad_weights) naming the file and the missing tensor.
  const tensor_entry& at(const std::string& name) const;
  // Copies the tensor's bytes (entry.nbytes() of them) into dst.
  void read(const tensor_entry& entry, void* dst) const;
  // Copies `length` bytes starting `offset` bytes into the tensor into dst. Throws model_error
  // (bad_input) when the range runs past the tensor.
  void read_range(const tensor_entry& entry, std::uint64_t offset, std::uint64_t length,
                  void* dst) const;

 private:
  std::unique_ptr<weight_file> file_;
  std::uint64_t data_start_ = 0;
  std::vector<tensor_entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct tensor_blob {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

// One tensor's header entry, announced before its bytes are written.
struct tensor_header {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t nbytes = 0;
};

// Writes a safetensors file whose header is known up front and whose data arrives in pieces, so
// a caller never holds more than one tensor: the header (data offsets back to back in the given
// order) goes out at construction, then the tensors' bytes in that order, then finish(). The file
// is PATH.tmp until finish() fsyncs and renames it; a writer destroyed unfinished removes it.
// Owned and used by one thread.
class safetensors_writer {
 public:
  // Throws model_error (bad_input for a name given twice, io when PATH.tmp cannot be written).
  safetensors_writer(std::string path, const std::vector<tensor_header>& tensors,
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~safetensors_writer();
  safetensors_writer(const safetensors_writer&) = delete;
  safetensors_writer& operator=(const safetensors_writer&) = delete;

  // Appends the next bytes of the data section; a tensor may come in several calls. Throws
  // model_error (bad_input) past the announced size, io when the write fails.
  void write(const void* data, std::size_t nbytes);
  // Throws model_error (bad_input) unless every announced byte came; io when sync/rename fails.
  void finish();
  std::uint64_t file_bytes() const { return 8 + header_bytes_ + data_bytes_; }

 private:
  void write_all(const void* data, std::size_t nbytes);
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  std::uint64_t header_bytes_ = 0;
  std::uint64_t data_bytes_ = 0;  // announced
  std::uint64_t written_ = 0;     // of the data section
};

// Writes tensors in the given order with __metadata__ (default {"format": "pt"}, what
// transformers expects), through a safetensors_writer: a reader never sees half a file.
void write_safetensors(const std::string& path, const std::vector<tensor_blob>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace cohort::core::model
