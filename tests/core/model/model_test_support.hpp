// Helpers for the core/model tests: fixture paths, small configs of every family, reading JSON
// files. No torch.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"
#include "tests/support/shared_data.hpp"

namespace cohort::test {

// $COHORT_SHARED/fixtures/hf/<name>; throws (failing the test) when the data is missing.
inline std::string shared_fixture(const std::string& name) {
  shared_file("fixtures/hf/" + name + "/reference.json");  // a complete fixture has its reference
  return shared_file("fixtures/hf/" + name);
}

// tests/core/model/fixtures/<name>: references written by transformers 5.17 (see generate.py).
inline std::string local_fixture(const std::string& name) {
  return std::string(COHORT_MODEL_FIXTURES) + "/" + name;
}

// A small config.json of every family: gpt2, llama (tied, GQA), mistral (window 3), qwen2
// (window 4 on layer 0), opt (projected embeddings, post-norm), gptj.
inline std::vector<nlohmann::json> family_configs() {
  return {
      {{"model_type", "gpt2"}, {"vocab_size", 40}, {"n_embd", 16}, {"n_layer", 2}, {"n_head", 2},
       {"n_positions", 16}},
      {{"model_type", "llama"}, {"vocab_size", 40}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
       {"tie_word_embeddings", true}},
      {{"model_type", "mistral"}, {"vocab_size", 40}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"intermediate_size", 24},
       {"sliding_window", 3}},
      {{"model_type", "qwen2"}, {"vocab_size", 40}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
       {"use_sliding_window", true}, {"sliding_window", 4}, {"max_window_layers", 1}},
      {{"model_type", "opt"}, {"vocab_size", 40}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 2}, {"ffn_dim", 24}, {"max_position_embeddings", 16},
       {"word_embed_proj_dim", 8}, {"do_layer_norm_before", false}},
      {{"model_type", "gptj"}, {"vocab_size", 40}, {"n_embd", 16}, {"n_layer", 2}, {"n_head", 2},
       {"rotary_dim", 4}, {"n_positions", 16}},
  };
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

}  // namespace cohort::test
