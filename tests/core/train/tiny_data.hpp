// A tiny SFT-style data set (byte ids with a learnable pattern, loss mask off on each sample's
// first tokens) and a tiny Llama config for it: engine and end-to-end tests. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/shard_writer.hpp"

namespace cohort::test {

// The tiny data sets' generator: each call the high bits of a 64-bit LCG's next state.
inline auto tiny_random(std::uint64_t seed) {
  return [state = seed]() mutable {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>(state >> 33);
  };
}

// Ends a tiny data set of `kind`: padded samples of at most 16 ids, PAD 0, EOS 2.
inline void finish_tiny(core::data::shard_writer& w, const char* kind, std::int64_t vocab) {
  core::data::manifest m;
  m.kind = kind;
  m.layout = "pad";
  m.seq_len = 16;
  m.pad_id = 0;
  m.eos_id = 2;
  m.vocab_size = vocab;
  w.finish(m);
}

// 96 samples of 6..16 ids in [3, 259) from a fixed generator; mask 0 on the first 3 tokens.
inline std::string make_tiny_dataset(const std::string& dir, std::int64_t vocab = 300) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = vocab;
  o.loss_mask = true;
  core::data::shard_writer w(dir, o);
  auto next = tiny_random(12345);
  for (int i = 0; i < 96; ++i) {
    const std::int64_t n = 6 + next() % 11;
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask;
    for (std::int64_t t = 0; t < n; ++t) {
      // A learnable pattern: mostly the previous id + 1, sometimes random.
      const bool follow = t > 0 && next() % 4 != 0;
      const std::int64_t id = follow ? 3 + (ids.back() - 3 + 1) % 256 : 3 + next() % 256;
      ids.push_back(static_cast<std::int32_t>(id));
      mask.push_back(t >= 3 ? 1 : 0);
    }
    w.append(ids.data(), n, mask.data());
  }
  finish_tiny(w, "sft", vocab);
  return dir;
}

// 32 seq2seq samples for the T5 fixture (vocab 128): the source "add A B" and the target "C"
// (C = A + B) as ids 3 + byte % 120; source_len 12, target_len 4, PAD 0, EOS 1.
inline std::string make_tiny_seq2seq_dataset(const std::string& dir) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = 128;
  o.target = true;
  core::data::shard_writer w(dir, o);
  const auto ids = [](const std::string& text) {
    std::vector<std::int32_t> out;
    for (unsigned char c : text) out.push_back(3 + c % 120);
    out.push_back(1);
    return out;
  };
  for (int i = 0; i < 32; ++i) {
    const int a = i % 7, b = (3 * i) % 5;
    const auto source = ids("add " + std::to_string(a) + " " + std::to_string(b));
    const auto target = ids(std::to_string(a + b));
    w.append_pair(source.data(), static_cast<std::int64_t>(source.size()), target.data(),
                  static_cast<std::int64_t>(target.size()));
  }
  core::data::manifest m;
  m.kind = "seq2seq";
  m.layout = "pad";
  m.seq_len = 12;
  m.pad_id = 0;
  m.eos_id = 1;
  m.vocab_size = 128;
  core::data::seq2seq_info s;
  s.target_len = 4;
  s.over_long = "truncate";
  m.seq2seq = s;
  w.finish(m);
  return dir;
}

// `pairs` (48 unless given) reward-model pairs (kind "pairs", seq_len 16, PAD 0, EOS 2): the chosen text
// follows the tiny data set's pattern (each id the previous + 1), the rejected one is random; 5..15 ids in
// [3, 259) and EOS, never PAD, so each text's last token is its EOS.
inline std::string make_tiny_pairs_dataset(const std::string& dir, int pairs = 48, std::int64_t vocab = 300) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = vocab;
  core::data::shard_writer w(dir, o);
  auto next = tiny_random(777);
  for (int i = 0; i < pairs; ++i) {
    for (const bool chosen : {true, false}) {
      const std::int64_t n = 5 + next() % 11;
      std::vector<std::int32_t> ids;
      for (std::int64_t t = 0; t < n; ++t) {
        const bool follow = chosen && t > 0;
        ids.push_back(static_cast<std::int32_t>(follow ? 3 + (ids.back() - 3 + 1) % 256 : 3 + next() % 256));
      }
      ids.push_back(2);
      w.append(ids.data(), static_cast<std::int64_t>(ids.size()), nullptr);
    }
  }
  finish_tiny(w, "pairs", vocab);
  return dir;
}

inline std::string tiny_llama_config(std::int64_t vocab = 300) {
  return R"({"model_type": "llama", "vocab_size": )" + std::to_string(vocab) +
         R"(, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false,
            "pad_token_id": 0})";
}

}  // namespace cohort::test
