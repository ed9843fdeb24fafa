// TensorBoard event files written without TensorFlow or a protobuf library: TFRecord framing
// (length, masked CRC32C of the length, data, masked CRC32C of the data) around hand-encoded
// tensorflow.Event messages holding scalar summaries; and a reader of the same subset that checks
// both CRCs, for tests and tools. No torch here. A writer is owned and used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace cohort::core::train {

// CRC32C (Castagnoli) of `size` bytes, and TFRecord's mask of it:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t masked_crc32c(const void* data, std::size_t size);

// A scalar as TensorBoard shows it: tag and value (stored as a float, as simple_value is).
using scalar = std::pair<std::string, double>;

// An events.out.tfevents file. The constructor creates `dir`, names the file
// events.out.tfevents.<unix seconds>.<host>.<suffix> (".<n>" added when that exists already, so
// every writer gets a file of its own) and writes the first record, Event{wall_time,
// file_version: "brain.Event:2"}. Every record is flushed when written. Throws runtime_error
// naming the file when it cannot be written.
class event_file_writer {
 public:
  event_file_writer(const std::string& dir, const std::string& suffix);
  // One Event{wall_time (unix seconds), step, summary{value: tag, simple_value}...}.
  void add_scalars(std::int64_t step, const std::vector<scalar>& scalars, double wall_time);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::ofstream out_;
};

// One Event as read back: file_version for the first record, step and scalars for the others.
struct event_record {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
};

// Every record of an event file, in order. Throws runtime_error naming the file and the byte
// offset for a truncated record, a CRC that does not match, or an Event it cannot decode.
std::vector<event_record> read_event_file(const std::string& path);

// Unix time now, in seconds with a fraction.
double unix_seconds_now();

}  // namespace cohort::core::train
