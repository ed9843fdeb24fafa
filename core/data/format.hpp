// The on-disk token-shard format: manifest.json plus, per shard, shard-NNNNN.tokens (little-endian
// uint16/uint32 ids), shard-NNNNN.index ((samples + 1) uint64 token offsets) and, for datasets with
// a loss mask, shard-NNNNN.mask (one bit per token, LSB first; 1 = the token is a training label).
// A seq2seq data set (kind "seq2seq", format_version 2) holds two streams with one entry per
// sample: .tokens/.index hold the source (encoder) ids, shard-NNNNN.target_tokens and
// .target_index the target (decoder label) ids, laid out as above.
// A pairs data set (kind "pairs", format_version 3; a reward model's) holds one stream whose
// samples come two by two: sample 2i is pair i's chosen text, sample 2i + 1 its rejected one.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cohort::core::data {

// Every failure of the data library: bad input, missing/truncated/corrupt files, bad options.
class data_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The newest format_version this build reads. Writers write the oldest that holds the data set:
// 1 for pretrain/sft (so older builds keep reading them), 2 for seq2seq, 3 for pairs (older
// builds refuse them by their version).
inline constexpr int format_version = 3;
inline constexpr int seq2seq_format_version = 2;
inline constexpr int pairs_format_version = 3;

// The format_version a data set of `kind` is written with: 2 for seq2seq, 3 for pairs, else 1.
int format_version_of(const std::string& kind);
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
  std::int64_t target_tokens = 0;  // seq2seq: the target stream's tokens in this shard
  std::optional<file_info> target_tokens_file;  // seq2seq: <name>.target_tokens
  std::optional<file_info> target_index_file;   // seq2seq: <name>.target_index
};

// The target side of a seq2seq data set; the source side uses the manifest's own fields (seq_len is
// the source length, tokens/truncated_* count source tokens, source.template its template).
struct seq2seq_info {
  std::int64_t target_len = 0;
  std::int64_t target_tokens = 0;
  std::string target_template;
  std::string over_long;  // "truncate", "skip" or "error": what the build did with over-long samples
  std::int64_t truncated_samples = 0;  // samples whose target was cut to target_len
  std::int64_t truncated_tokens = 0;   // target tokens cut
  std::int64_t skipped_samples = 0;    // records left out (over_long "skip")
};

struct manifest {
  int version = 1;
  std::string kind;    // "pretrain", "sft", "seq2seq" or "pairs"
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
  std::vector<std::string> special_tokens;  // added by `cohort-data build --special-tokens`, in order
  // Their ids, one per special_tokens entry (a token already in the vocabulary keeps its id, the
  // others follow the tokenizer's vocabulary). Empty in manifests of data sets built before the
  // ids were recorded ("special_token_ids" absent): what needs them (a job's model.added_tokens,
  // the export's tokenizer files) asks for a rebuild.
  std::vector<std::int64_t> special_token_ids;
  std::string source_input;
  std::string source_template;
  std::string source_field;
  std::vector<shard_info> shards;
  std::optional<seq2seq_info> seq2seq;  // set exactly when kind is "seq2seq"
};

// Every file of a shard, as {file name, what the manifest says of it}, in a fixed order.
std::vector<std::pair<std::string, const file_info*>> shard_files(const shard_info& s);

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
