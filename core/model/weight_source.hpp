// Where a model's initial weights come from, read one slice at a time, so that a rank materialises
// only the elements it keeps (its ZeRO shards) and never the whole model: a Hugging Face directory
// (open_hf_weights) or a seeded random initialisation (seeded_init). Parameters are named and
// shaped as the decoder's hf_parameters() list them (a model built on the meta device gives them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_files.hpp"
#include "core/model/model_config.hpp"

namespace cohort::core::model {

// Both implementations keep no mutable state: read() is const and thread-safe (several threads may
// read from one source at once). An open_hf_weights source holds its files open until destroyed.
class weight_source {
 public:
  virtual ~weight_source() = default;
  // Fills `out` (1-D, fp32, CPU, contiguous; out.numel() elements) with elements
  // [begin, begin + out.numel()) of parameter `name` flattened in row-major order of its
  // Hugging Face shape. Throws model_error naming the file/tensor (or parameter) and the range
  // when the range runs past the parameter or the name is unknown (bad_input), or `out` is not
  // a 1-D contiguous fp32 CPU tensor (bad_input).
  virtual void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const = 0;
};

// read()'s checks, for implementations: throws model_error (bad_input) naming `what` (the
// parameter, and file) when `out` is not a 1-D contiguous fp32 CPU tensor, or when elements
// [begin, begin + out.numel()) run past the parameter's `numel`.
void check_read(const std::string& what, std::int64_t begin, const torch::Tensor& out, std::int64_t numel);

// The safetensors files of a Hugging Face directory (model.safetensors, or the shards listed in
// model.safetensors.index.json), checked against `expected` (the meta model's hf_parameters():
// every name present, shapes equal, dtypes F32/F16/BF16) when opened, with load_hf_weights' rules
// (open_hf_weight_files: tensors stored without the base model's prefix are found, a redundant
// lm_head.weight of tied embeddings and rotary/attention buffers are ignored, other extra tensors
// refused); errors name the file and tensor. read() pread()s only the requested bytes (one pread
// for an F32 range; F16/BF16 in pieces of at most 8 Mi elements through a staging buffer) and
// converts them to fp32 (a directory in S3: ranged GETs of those bytes, hf_files.hpp). Only names
// and shapes of `expected` are used (meta tensors are fine).
std::unique_ptr<weight_source> open_hf_weights(const hf_files& dir,
                                               const std::vector<hf_parameter>& expected);
std::unique_ptr<weight_source> open_hf_weights(const std::string& dir,  // a local directory
                                               const std::vector<hf_parameter>& expected);

// Deterministic random initialisation as transformers' _init_weights does it and decoder_impl's
// `initialize` path does today: 2-D weights (linear maps, embeddings, lm_head) ~ normal(0,
// config.initializer_range) with the row of config.pad_token_id of the token embedding zero,
// 1-D weights (norms) 1, biases 0. Each parameter's flattened values are cut into chunks of
// seeded_init_chunk elements; chunk c of parameter `name` is drawn by its own counter-based
// generator keyed by splitmix64/FNV-1a of (seed, name, c): elements 2p and 2p + 1 of a chunk are
// Box-Muller's pair of the generator's p-th output. A value therefore depends only on (seed, name,
// index): any partition into slices or ranks gives the same weights, and reading a slice computes
// only its own elements (in parallel, at::parallel_for; ~0.5 G elements per CPU-second).
// Box-Muller's log, sin and cos are polynomials of IEEE +, *, / and sqrt (no libm, no fused
// multiply-add), so the values are bitwise the same on every x86-64 CPU, whatever its vector unit.
// Throws model_error (bad_input) for a parameter that is neither 2-D weight, 1-D weight nor bias.
std::unique_ptr<weight_source> seeded_init(const model_config& config,
                                           const std::vector<hf_parameter>& params,
                                           std::uint64_t seed);
inline constexpr std::int64_t seeded_init_chunk = std::int64_t{1} << 20;

// LoRA adapters' initial values (decoder_impl::lora_parameters()): each .lora_A.weight (r, in)
// uniform in [-1/√in, 1/√in) as peft's kaiming_uniform_(a = √5) draws it, each .lora_B.weight
// zeros, so the adapted model starts as the base. A value depends only on (seed, name, index), as
// with seeded_init: any number of ranks gets the same adapters. Throws model_error (bad_input) for
// a parameter that is not a 2-D adapter.
std::unique_ptr<weight_source> lora_init(const std::vector<hf_parameter>& adapters, std::uint64_t seed);

// Fills all of `dst` (any dtype and device, contiguous, the parameter's shape: dst.numel()
// elements are read from element 0) with parameter `name`, reading in fp32 pieces of at most
// 16 Mi elements (64 MiB), so that a whole model is streamed tensor by tensor. Throws model_error
// (bad_input) for a non-contiguous dst, and whatever source.read() throws.
void fill_parameter(const weight_source& source, const std::string& name, torch::Tensor& dst);

}  // namespace cohort::core::model
