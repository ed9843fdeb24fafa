// lora_config: the family's adapter targets, adapter tensor names and peft's adapter_config.json.
#include "core/model/lora_config.hpp"

#include <algorithm>

#include "core/model/model_error.hpp"

namespace cohort::core::model {

std::vector<std::string> lora_module_names(family f) {
  switch (f) {
    case family::gpt2:
      return {"c_attn", "c_proj", "c_fc"};
    case family::opt:
      return {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
    case family::gptj:
      return {"q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"};
    case family::llama:
    case family::mistral:
    case family::qwen2:
      break;
  }
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

void check_lora_config(const lora_config& c, family f) {
  const auto bad = [](const std::string& what) { throw model_error(model_errc::bad_input, what); };
  if (c.r < 1) bad("model.lora.r: " + std::to_string(c.r) + " is not a rank (allowed: 1 or more)");
  if (!(c.alpha > 0)) bad("model.lora.alpha: " + std::to_string(c.alpha) + " (allowed: a number > 0)");
  if (!(c.dropout >= 0 && c.dropout < 1))
    bad("model.lora.dropout: " + std::to_string(c.dropout) + " (allowed: [0, 1))");
  const auto names = lora_module_names(f);
  std::string allowed;
  for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
  if (c.target_modules.empty()) bad("model.lora.target_modules: empty (allowed for a " +
                                    std::string(family_name(f)) + " model: " + allowed + ")");
  for (const auto& t : c.target_modules) {
    if (std::find(names.begin(), names.end(), t) == names.end())
      bad("model.lora.target_modules: a " + std::string(family_name(f)) + " model has no module '" + t +
          "' (allowed: " + allowed + ")");
  }
}

std::string module_of_weight(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

std::string lora_a_name(const std::string& module) { return module + ".lora_A.weight"; }
std::string lora_b_name(const std::string& module) { return module + ".lora_B.weight"; }

std::string module_of_adapter(const std::string& name) {
  for (const std::string suffix : {".lora_A.weight", ".lora_B.weight"}) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return name.substr(0, name.size() - suffix.size());
  }
  return "";
}

nlohmann::json lora_to_json(const lora_config& c) {
  return {{"r", c.r}, {"alpha", c.alpha}, {"dropout", c.dropout}, {"target_modules", c.target_modules},
          {"base", c.base}};
}

lora_config lora_from_json(const nlohmann::json& j, const std::string& origin) {
  lora_config c;
  try {
    c.r = j.at("r").get<std::int64_t>();
    c.alpha = j.at("alpha").get<double>();
    c.dropout = j.at("dropout").get<double>();
    c.target_modules = j.at("target_modules").get<std::vector<std::string>>();
    c.base = j.at("base").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw model_error(model_errc::bad_config, origin + ": not a LoRA description {r, alpha, dropout, "
                                                       "target_modules, base}: " + e.what());
  }
  return c;
}

nlohmann::json peft_adapter_config(const lora_config& c, const model_config& base,
                                   const std::vector<std::string>& modules_to_save) {
  // The keys every peft release since 0.3 reads (later ones ignore what they do not know, earlier
  // ones refuse it, so nothing newer is written).
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", c.base},
          {"r", c.r},
          {"lora_alpha", c.alpha},
          {"lora_dropout", c.dropout},
          {"target_modules", c.target_modules},
          {"bias", "none"},
          {"fan_in_fan_out", base.conv1d},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"modules_to_save", modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(modules_to_save)},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"revision", nullptr}};
}

}  // namespace cohort::core::model
