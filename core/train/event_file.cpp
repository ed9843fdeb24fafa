// TensorBoard event files: TFRecord framing, CRC32C and the Event/Summary protobuf subset.
#include "core/train/event_file.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <stdexcept>

namespace cohort::core::train {

namespace {

const std::array<std::uint32_t, 256>& crc_table() {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: varints, tags, fixed-width little-endian numbers, length-delimited fields.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: double
  put_fixed(e, wall_time);
  return e;
}

// Reads protobuf fields from [pos, end) of `bytes`; errors name `where`.
struct wire_reader {
  const std::string& bytes;
  std::size_t pos, end;
  const std::string& where;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(where + ": " + what + " at byte " + std::to_string(pos) + " of the record");
  }
  bool done() const { return pos >= end; }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= end) fail("truncated varint");
      const auto b = static_cast<unsigned char>(bytes[pos++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  template <class T>
  T fixed() {
    if (end - pos < sizeof(T)) fail("truncated fixed-width field");
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::pair<std::size_t, std::size_t> delimited() {  // [begin, end) of a length-delimited field
    const auto n = varint();
    if (n > end - pos) fail("length-delimited field runs past its message");
    const std::size_t begin = pos;
    pos += n;
    return {begin, pos};
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: fixed<std::uint64_t>(); break;
      case 2: delimited(); break;
      case 5: fixed<std::uint32_t>(); break;
      default: fail("unsupported wire type " + std::to_string(wire_type));
    }
  }
};

void decode_value(const std::string& bytes, std::size_t begin, std::size_t end, const std::string& where,
                  event_record& out) {
  wire_reader r{bytes, begin, end, where};
  std::string tag;
  float value = 0;
  bool has_value = false;
  while (!r.done()) {
    const auto key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 2) {
      const auto [b, e] = r.delimited();
      tag = bytes.substr(b, e - b);
    } else if (field == 2 && type == 5) {
      value = r.fixed<float>();
      has_value = true;
    } else {
      r.skip(type);
    }
  }
  if (!has_value) r.fail("summary value \"" + tag + "\" has no simple_value");
  out.scalars.emplace_back(tag, value);
}

event_record decode_event(const std::string& bytes, const std::string& where) {
  event_record out;
  wire_reader r{bytes, 0, bytes.size(), where};
  while (!r.done()) {
    const auto key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 1) {
      out.wall_time = r.fixed<double>();
    } else if (field == 2 && type == 0) {
      out.step = static_cast<std::int64_t>(r.varint());
    } else if (field == 3 && type == 2) {
      const auto [b, e] = r.delimited();
      out.file_version = bytes.substr(b, e - b);
    } else if (field == 5 && type == 2) {
      const auto [b, e] = r.delimited();
      wire_reader summary{bytes, b, e, where};
      while (!summary.done()) {
        const auto k = summary.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {
          const auto [vb, ve] = summary.delimited();
          decode_value(bytes, vb, ve, where, out);
        } else {
          summary.skip(static_cast<int>(k & 7));
        }
      }
    } else {
      r.skip(type);
    }
  }
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  const auto& table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

event_file_writer::event_file_writer(const std::string& dir, const std::string& suffix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create TensorBoard directory " + dir + ": " + ec.message());
  const double now = unix_seconds_now();
  const std::string base = dir + "/events.out.tfevents." + std::to_string(static_cast<std::int64_t>(now)) + "." +
                           host_name() + (suffix.empty() ? "" : "." + suffix);
  path_ = base;
  for (int n = 1; fs::exists(path_); ++n) path_ = base + "." + std::to_string(n);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file " + path_);
  std::string e = event_header(now);
  put_bytes(e, 3, "brain.Event:2");  // file_version
  write_record(e);
}

void event_file_writer::add_scalars(std::int64_t step, const std::vector<scalar>& scalars, double wall_time) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);  // simple_value: float
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time);
  put_tag(e, 2, 0);  // step: int64
  put_varint(e, static_cast<std::uint64_t>(step));
  put_bytes(e, 5, summary);
  write_record(e);
}

void event_file_writer::write_record(const std::string& data) {
  std::string record;
  const auto length = static_cast<std::uint64_t>(data.size());
  put_fixed(record, length);
  put_fixed(record, masked_crc32c(record.data(), sizeof length));
  record += data;
  put_fixed(record, masked_crc32c(data.data(), data.size()));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file " + path_);
}

std::vector<event_record> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read TensorBoard event file " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<event_record> records;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string where = path + ": record at byte " + std::to_string(pos);
    if (bytes.size() - pos < 12) throw std::runtime_error(where + ": truncated header");
    std::uint64_t length;
    std::uint32_t length_crc;
    std::memcpy(&length, bytes.data() + pos, 8);
    std::memcpy(&length_crc, bytes.data() + pos + 8, 4);
    if (length_crc != masked_crc32c(bytes.data() + pos, 8)) throw std::runtime_error(where + ": length CRC mismatch");
    if (bytes.size() - pos - 12 < length + 4) throw std::runtime_error(where + ": truncated data");
    const std::string data = bytes.substr(pos + 12, length);
    std::uint32_t data_crc;
    std::memcpy(&data_crc, bytes.data() + pos + 12 + length, 4);
    if (data_crc != masked_crc32c(data.data(), data.size())) throw std::runtime_error(where + ": data CRC mismatch");
    records.push_back(decode_event(data, where));
    pos += 12 + length + 4;
  }
  return records;
}

}  // namespace cohort::core::train
