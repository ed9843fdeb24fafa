// Writes a token-shard dataset sample by sample (see shard_writer.hpp).
#include "core/data/shard_writer.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cohort::core::data {
namespace {

// Files a dataset directory may hold: manifest.json(.tmp) and
// shard-NNNNN.{tokens,index,mask,target_tokens,target_index}.
bool is_dataset_file(const std::string& name) {
  if (name == manifest_name || name == std::string(manifest_name) + ".tmp") return true;
  const auto dot = name.rfind('.');
  if (name.rfind("shard-", 0) != 0 || dot == std::string::npos || dot < 11) return false;
  for (std::size_t i = 6; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  const auto ext = name.substr(dot + 1);
  return ext == "tokens" || ext == "index" || ext == "mask" || ext == "target_tokens" || ext == "target_index";
}

}  // namespace

void prepare_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw data_error(dir + ": exists and is not a directory; choose another --out");
  fs::create_directories(dir, ec);
  if (ec) throw data_error(dir + ": cannot create directory: " + ec.message());
  std::vector<fs::path> old;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (!entry.is_regular_file() || !is_dataset_file(name))
      throw data_error(dir + ": not empty and not a cohort dataset (found \"" + name +
                       "\"); choose an empty or new --out directory");
    old.push_back(entry.path());
  }
  // The manifest goes first: an interrupted cleanup must not leave a manifest without its shards.
  fs::remove(fs::path(dir) / manifest_name, ec);
  for (const auto& p : old) fs::remove(p, ec);
}

void shard_writer::output::open(const std::string& p) {
  path = p;
  file.reset(std::fopen(p.c_str(), "wb"));
  if (!file) throw data_error(p + ": cannot create: " + std::strerror(errno));
  std::setvbuf(file.get(), nullptr, _IOFBF, 1 << 20);
  hash = xxh64_stream();
  bytes = 0;
}

void shard_writer::output::write(const void* data, std::size_t size) {
  if (size == 0) return;
  if (std::fwrite(data, 1, size, file.get()) != size) throw data_error(path + ": write failed (disk full?)");
  hash.update(data, size);
  bytes += size;
}

file_info shard_writer::output::close() {
  if (std::fflush(file.get()) != 0) throw data_error(path + ": write failed (disk full?)");
  file.reset();
  return {bytes, hash.hex_digest()};
}

shard_writer::shard_writer(std::string dir, const shard_writer_options& options)
    : dir_(std::move(dir)), options_(options) {
  if (options_.token_bytes != 2 && options_.token_bytes != 4) throw data_error("token_bytes must be 2 or 4");
  if (options_.shard_tokens < 1) throw data_error("shard_tokens must be >= 1");
  if (options_.vocab_size < 1) throw data_error("vocab_size must be >= 1");
  if (options_.token_bytes == 2 && options_.vocab_size > 65536)
    throw data_error("vocab_size " + std::to_string(options_.vocab_size) + " does not fit uint16 tokens");
}

shard_writer::~shard_writer() = default;

void shard_writer::open_shard() {
  const auto name = shard_name(shards_.size());
  const auto base = (std::filesystem::path(dir_) / name).string();
  tokens_out_.open(base + ".tokens");
  index_out_.open(base + ".index");
  if (options_.loss_mask) mask_out_.open(base + ".mask");
  const std::uint64_t zero = 0;
  index_out_.write(&zero, sizeof zero);
  if (options_.target) {
    target_tokens_out_.open(base + ".target_tokens");
    target_index_out_.open(base + ".target_index");
    target_index_out_.write(&zero, sizeof zero);
  }
  shard_samples_ = 0;
  shard_tokens_ = 0;
  shard_target_tokens_ = 0;
  mask_byte_ = 0;
  shard_open_ = true;
  shard_info info;
  info.name = name;
  shards_.push_back(info);
}

void shard_writer::close_shard() {
  shard_info& info = shards_.back();
  if (options_.loss_mask && (shard_tokens_ & 7) != 0) mask_out_.write(&mask_byte_, 1);
  info.samples = shard_samples_;
  info.tokens = shard_tokens_;
  info.tokens_file = tokens_out_.close();
  info.index_file = index_out_.close();
  if (options_.loss_mask) info.mask_file = mask_out_.close();
  if (options_.target) {
    info.target_tokens = shard_target_tokens_;
    info.target_tokens_file = target_tokens_out_.close();
    info.target_index_file = target_index_out_.close();
  }
  shard_open_ = false;
}

void shard_writer::check_open(std::int64_t n) {
  if (finished_) throw data_error(dir_ + ": append after finish()");
  if (n < 0) throw data_error("sample length must be >= 0");
  if (!shard_open_) open_shard();
}

void shard_writer::write_ids(output& out, const std::int32_t* ids, std::int64_t n) {
  buffer_.resize(static_cast<std::size_t>(n) * options_.token_bytes);
  for (std::int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= options_.vocab_size)
      throw data_error("token id " + std::to_string(ids[t]) + " outside the vocabulary [0, " +
                       std::to_string(options_.vocab_size) + ")");
    if (options_.token_bytes == 2) {
      const auto v = static_cast<std::uint16_t>(ids[t]);
      std::memcpy(buffer_.data() + 2 * t, &v, 2);
    } else {
      const auto v = static_cast<std::uint32_t>(ids[t]);
      std::memcpy(buffer_.data() + 4 * t, &v, 4);
    }
  }
  out.write(buffer_.data(), buffer_.size());
}

// Counts a sample whose n (source) tokens are written, and rolls over to a new shard when full.
void shard_writer::end_sample(std::int64_t n) {
  shard_tokens_ += n;
  ++shard_samples_;
  const auto offset = static_cast<std::uint64_t>(shard_tokens_);
  index_out_.write(&offset, sizeof offset);
  ++samples_;
  tokens_ += n;
  if (shard_tokens_ + shard_target_tokens_ >= options_.shard_tokens) close_shard();
}

void shard_writer::append(const std::int32_t* ids, std::int64_t n, const std::uint8_t* loss_mask) {
  if (options_.target) throw data_error(dir_ + ": a seq2seq data set takes samples through append_pair()");
  if (options_.loss_mask && loss_mask == nullptr && n > 0)
    throw data_error("this dataset has a loss mask; append() needs one");
  check_open(n);
  write_ids(tokens_out_, ids, n);
  if (options_.loss_mask) {
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t bit = shard_tokens_ + t;
      if (loss_mask[t]) {
        mask_byte_ |= static_cast<std::uint8_t>(1u << (bit & 7));
        ++loss_tokens_;
      }
      if ((bit & 7) == 7) {
        mask_out_.write(&mask_byte_, 1);
        mask_byte_ = 0;
      }
    }
  } else {
    loss_tokens_ += n;
  }
  end_sample(n);
}

void shard_writer::append_pair(const std::int32_t* source, std::int64_t n, const std::int32_t* target,
                               std::int64_t m) {
  if (!options_.target) throw data_error(dir_ + ": append_pair() needs a seq2seq data set (options.target)");
  if (m < 0) throw data_error("target length must be >= 0");
  check_open(n);
  write_ids(tokens_out_, source, n);
  write_ids(target_tokens_out_, target, m);
  shard_target_tokens_ += m;
  target_tokens_ += m;
  loss_tokens_ += m;  // every target token is a label
  const auto offset = static_cast<std::uint64_t>(shard_target_tokens_);
  target_index_out_.write(&offset, sizeof offset);
  end_sample(n);
}

manifest shard_writer::finish(manifest m) {
  if (finished_) throw data_error(dir_ + ": finish() called twice");
  if (shard_open_) close_shard();
  finished_ = true;
  m.token_bytes = options_.token_bytes;
  m.vocab_size = options_.vocab_size;
  m.has_loss_mask = options_.loss_mask;
  m.samples = samples_;
  m.tokens = tokens_;
  m.loss_tokens = loss_tokens_;
  m.shards = shards_;
  if (options_.target) {
    m.version = seq2seq_format_version;
    m.kind = "seq2seq";
    if (!m.seq2seq) m.seq2seq = seq2seq_info{};
    m.seq2seq->target_tokens = target_tokens_;
  } else {
    m.version = format_version_of(m.kind);
  }
  write_manifest(dir_, m);
  return m;
}

}  // namespace cohort::core::data
