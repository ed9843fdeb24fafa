// One file of a model's weights read by byte range, wherever it is kept: a local file (pread) or an
// object in S3 (ranged GETs, hf_files.hpp). safetensors_reader reads through one, so a rank fetches
// only the header and the byte ranges of its own slices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cohort::core::model {

// Immutable once open: read() is const and thread-safe (several threads may read one file at once).
class weight_file {
 public:
  virtual ~weight_file() = default;
  virtual const std::string& name() const = 0;  // its path or s3:// URL, as errors name it
  virtual std::uint64_t size() const = 0;       // in bytes, as found when opened
  // Copies bytes [offset, offset + length) into dst. Throws model_error (io) naming the file and
  // the range when they cannot all be read (the file shrank, the object changed, storage failed).
  virtual void read(std::uint64_t offset, std::uint64_t length, void* dst) const = 0;
};

// read()'s range check, for implementations: throws model_error (io) naming the file when bytes
// [offset, offset + length) run past its size.
void check_weight_range(const weight_file& file, std::uint64_t offset, std::uint64_t length);

// The file at `path`, held open until destroyed. Throws model_error (io) naming it when it cannot
// be opened or is not a regular file.
std::unique_ptr<weight_file> open_local_weight_file(const std::string& path);

}  // namespace cohort::core::model
