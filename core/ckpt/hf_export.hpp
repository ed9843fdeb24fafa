// Exporting a checkpoint's model as a Hugging Face directory (config.json, safetensors weights —
// sharded with an index above a size limit — and tokenizer files), streamed one tensor at a time
// so memory stays bounded by the largest tensor, not the model. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cohort::core::ckpt {

// Logical tensors named "param/<hf name>" hold the fp32 master weights; everything else in a
// checkpoint (optimizer moments, counters) is not exported.
inline constexpr const char* param_tensor_prefix = "param/";
// The manifest extra's key of a LoRA job's checkpoint (model::lora_to_json: r, alpha, dropout,
// target_modules and base, the frozen base's Hugging Face directory). Its param/ tensors are the
// adapters, "<module>.lora_A.weight" (r, in) and "<module>.lora_B.weight" (out, r), nothing else.
inline constexpr const char* lora_extra_key = "lora";

struct hf_export_options {
  std::string dtype = "fp32";                     // fp32 | bf16 (round to nearest even, as torch)
  std::uint64_t max_shard_bytes = 5'000'000'000;  // above this, model-0000i-of-0000n + an index
  bool verify = true;                             // check every file's size and XXH64 first
  // Called after each weight written: the bytes written so far and the weights' total (in the
  // export's dtype), e.g. for a heartbeat's progress.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress{};
};

struct hf_export_stats {
  std::uint64_t tensors = 0;               // weights written
  std::uint64_t weight_bytes = 0;          // their bytes in the export's dtype (the index's total_size)
  std::vector<std::string> files;          // names written into the output directory, in order
  std::uint64_t largest_buffer_bytes = 0;  // the one staging buffer: the largest fp32 tensor
  std::vector<std::string> warnings;       // e.g. a listed tokenizer file that is missing
};

// Writes OUT_DIR from the checkpoint in CKPT_DIR (created if needed; stale model*.safetensors and
// index files there are removed first). A LoRA checkpoint's export is the base with the adapters
// merged in: every tensor of the base directory's safetensors files under its own name, the weight
// of each adapted module W + (alpha / r) · B A (transposed for GPT-2's Conv1D), so that any
// Hugging Face loader reads a plain model; memory: the adapters plus the largest base tensor. A
// LoRA checkpoint of a grown vocabulary also holds the embedding and head (and its bias) whole:
// they replace the base's (a tied head's redundant copy in the base is left out).
// A base directory that is gone, lacks a module the adapters name or has it in another shape is
// ckpt_error bad_input naming it. The manifest's extra must hold "model_config" (the HF
// config.json object; a T5's, model_type "t5", exports as save_t5_model writes it) and may hold
// "tokenizer_files" (absolute paths to copy; a missing one is a warning) and "added_tokens" (the
// data set's, with their ids: written into the copied tokenizer files, tokenizer_added_tokens.hpp).
// Throws ckpt_error: not_committed / bad_manifest / missing_file for a checkpoint that cannot be
// read or was not written by a causal_lm job, checksum_mismatch (listing every problem) when
// verification fails, bad_input for bad options or tokenizer files that give an added token
// another id, io when writing fails; each names the file.
hf_export_stats export_hf(const std::string& ckpt_dir, const std::string& out_dir,
                          const hf_export_options& options = {});

// Writes a LoRA checkpoint's adapters into OUT_DIR as peft saves a LoraModel:
// adapter_config.json (model::peft_adapter_config) and adapter_model.safetensors, each adapter
// under "base_model.model.<module>.lora_A.weight" / "...lora_B.weight", in options.dtype (sharding
// does not apply). peft.PeftModel.from_pretrained(base, OUT_DIR) loads it. The weights a grown
// vocabulary trained whole are peft's modules_to_save: "base_model.model.<name>" (a tied head
// also as lm_head.weight), their modules named in adapter_config.json; peft loads them onto a
// base resized to their vocabulary. Throws ckpt_error as export_hf, and bad_manifest for a
// checkpoint without LoRA adapters.
hf_export_stats export_peft(const std::string& ckpt_dir, const std::string& out_dir,
                            const hf_export_options& options = {});
// Whether the checkpoint in CKPT_DIR holds LoRA adapters (its manifest's extra names them).
bool is_lora_checkpoint(const std::string& ckpt_dir);

}  // namespace cohort::core::ckpt
