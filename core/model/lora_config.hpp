// LoRA adapters as the decoder, the engine, checkpoints and the peft export share them: rank,
// scale, dropout, which linear maps get adapters (peft's module names), the names of the adapter
// tensors, and peft's adapter_config.json. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model_config.hpp"

namespace cohort::core::model {

// y = W x + scaling() · B A dropout(x), A (r, in) and B (out, r), on every linear map of a decoder
// layer whose Hugging Face name ends in one of target_modules (peft's matching).
struct lora_config {
  std::int64_t r = 8;
  double alpha = 8;
  double dropout = 0;
  std::vector<std::string> target_modules;
  std::string base;  // the frozen base's Hugging Face directory (checkpoints and exports)
  double scaling() const { return alpha / static_cast<double>(r); }
};

// The row stride, in elements, of a group of frozen weights that keeps its adapters' B's beside
// its rows (decoder_impl::load_frozen): `in` + the group's summed ranks, rounded up to whole
// tiles of 64 of the GEMMs' inner dimension.
constexpr std::int64_t lora_room_row_stride(std::int64_t in, std::int64_t ranks) {
  return (in + ranks + 63) / 64 * 64;
}

// The module names peft gives a family's per-layer linear maps (what target_modules may name).
std::vector<std::string> lora_module_names(family f);
// Throws model_error (bad_input) naming model.lora.target_modules, the family and its names when
// a target is not one of lora_module_names(f), or r < 1, alpha <= 0 or dropout outside [0, 1).
void check_lora_config(const lora_config& config, family f);

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj" (the module).
std::string module_of_weight(const std::string& weight_name);
// The adapter tensors of a module, as the decoder and checkpoints name them:
// "<module>.lora_A.weight" (r, in) and "<module>.lora_B.weight" (out, r).
std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);
// Whether `name` is one of those, and if so its module (else "").
std::string module_of_adapter(const std::string& name);
// What peft's adapter_model.safetensors calls an adapter tensor: the prefix of a PeftModel
// around a *ForCausalLM model before the decoder's name.
inline constexpr const char* peft_tensor_prefix = "base_model.model.";

// {"r", "alpha", "dropout", "target_modules", "base"}: how checkpoints record the adapters.
nlohmann::json lora_to_json(const lora_config& config);
// Throws model_error (bad_config) naming `origin` and the key.
lora_config lora_from_json(const nlohmann::json& json, const std::string& origin);
// peft's adapter_config.json for these adapters on a model of `base` (peft_type LORA, task_type
// CAUSAL_LM, bias none, fan_in_fan_out for GPT-2's Conv1D weights, inference_mode true), with
// `modules_to_save` (modules trained whole, e.g. "embed_tokens", "lm_head"; none: null).
nlohmann::json peft_adapter_config(const lora_config& config, const model_config& base,
                                   const std::vector<std::string>& modules_to_save = {});

}  // namespace cohort::core::model
