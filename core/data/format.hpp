// The on-disk token-shard format: manifest.json plus, per shard, shard-NNNNN.tokens (little-endian
// uint16/uint32 ids), shard-NNNNN.index ((samples + 1) uint64 token offsets) and, for datasets with
// a loss mask, shard-NNNNN.mask (one bit per token, LSB first; 1 = the token is a training label).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::core::data {

// Every failure of the data library: bad input, missing/truncated/corrupt files, bad options.
class data_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int format_version = 1;
inline constexpr const char* manifest_name = "manifest.json";

struct file_info {
  std::uint64_t bytes = 0;
  std::string xxh64;  // 16 hex digits of the whole file
};

struct shard_info {
  std::string name;  // "shard-00000"; files are <name>.tokens, <name>.index, <name>.mask
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  file_info tokens_file;
  file_info index_file;
  std::optional<file_info> mask_file;
};

struct manifest {
  int version = format_version;
  std::string kind;    // "pretrain" or "sft"
  std::string layout;  // "pack" (samples packed to seq_len blocks) or "pad" (one record per sample)
  std::string tokenizer_identity;
  std::string tokenizer_path;
  std::int64_t vocab_size = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  std::int64_t seq_len = 0;
  std::int64_t pad_id = 0;
  std::optional<std::int64_t> bos_id;  // set when builders prepended BOS to each record
  std::int64_t eos_id = 0;
  bool has_loss_mask = false;
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  std::int64_t loss_tokens = 0;
  std::int64_t records = 0;  // input records (documents / jsonl lines) consumed
  std::int64_t truncated_samples = 0;
  std::int64_t truncated_tokens = 0;
  std::vector<std::string> special_tokens;
  std::string source_input;
  std::string source_template;
  std::string source_field;
  std::vector<shard_info> shards;
};

std::string shard_name(std::size_t index);
std::string token_dtype_name(int token_bytes);  // "uint16" / "uint32"
int token_bytes_for_vocab(std::int64_t vocab_size);

// JSON text of the manifest (pretty-printed) and back. read_manifest names the file and field on
// any error.
std::string manifest_to_json(const manifest& m);
manifest manifest_from_json(const std::string& text, const std::string& where);
manifest read_manifest(const std::string& dir);
void write_manifest(const std::string& dir, const manifest& m);  // atomic (tmp + rename)

}  // namespace cohort::core::data
