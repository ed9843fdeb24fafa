// Exporting a checkpoint's model as a Hugging Face directory (config.json, safetensors weights —
// sharded with an index above a size limit — and tokenizer files), streamed one tensor at a time
// so memory stays bounded by the largest tensor, not the model. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::core::ckpt {

// Logical tensors named "param/<hf name>" hold the fp32 master weights; everything else in a
// checkpoint (optimizer moments, counters) is not exported.
inline constexpr const char* param_tensor_prefix = "param/";

struct hf_export_options {
  std::string dtype = "fp32";                     // fp32 | bf16 (round to nearest even, as torch)
  std::uint64_t max_shard_bytes = 5'000'000'000;  // above this, model-0000i-of-0000n + an index
  bool verify = true;                             // check every file's size and XXH64 first
};

struct hf_export_stats {
  std::uint64_t tensors = 0;               // weights written
  std::uint64_t weight_bytes = 0;          // their bytes in the export's dtype (the index's total_size)
  std::vector<std::string> files;          // names written into the output directory, in order
  std::uint64_t largest_buffer_bytes = 0;  // the one staging buffer: the largest fp32 tensor
  std::vector<std::string> warnings;       // e.g. a listed tokenizer file that is missing
};

// Writes OUT_DIR from the checkpoint in CKPT_DIR (created if needed; stale model*.safetensors and
// index files there are removed first). The manifest's extra must hold "model_config" (the HF
// config.json object) and may hold "tokenizer_files" (absolute paths to copy; a missing one is a
// warning). Throws ckpt_error: not_committed / bad_manifest / missing_file for a checkpoint that
// cannot be read or was not written by a causal_lm job, checksum_mismatch (listing every problem)
// when verification fails, bad_input for bad options, io when writing fails; each names the file.
hf_export_stats export_hf(const std::string& ckpt_dir, const std::string& out_dir,
                          const hf_export_options& options = {});

}  // namespace cohort::core::ckpt
