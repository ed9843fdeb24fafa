// config.json parsing: both transformers spellings, family defaults, and refusals.
#include "tests/support/catch_torch.hpp"

#include "core/model/model_config.hpp"
#include "core/model/model_error.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::model;
using nlohmann::json;

namespace {

json llama_json() {
  return {{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 32},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
}

std::string refusal(const json& j) {
  try {
    parse_config(j, "/x/config.json");
  } catch (const model_error& e) {
    CHECK(e.code() == model_errc::bad_config);
    return e.what();
  }
  FAIL("config was accepted: " << j.dump());
  return "";
}

}  // namespace

TEST_CASE("a transformers 5 config reads rope theta from rope_parameters", "[core][model]") {
  json j = llama_json();
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  j["dtype"] = "bfloat16";
  const auto c = parse_config(j, "c.json");
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.dtype == "bfloat16");
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.rotary == rotary_style::half);
}

TEST_CASE("a transformers 4 config reads top-level rope_theta, rope_scaling and torch_dtype",
          "[core][model]") {
  json j = llama_json();
  j["rope_theta"] = 1e6;
  j["torch_dtype"] = "float16";
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const auto c = parse_config(j, "c.json");
  CHECK(c.rope_theta == 1e6);
  CHECK(c.dtype == "float16");
  CHECK(c.scaling.type == "linear");
  CHECK(c.scaling.factor == 2.0);
  const json out = to_hf_json(c);
  CHECK(out["torch_dtype"] == "float16");
  CHECK(out["rope_theta"] == 1e6);
  CHECK(parse_config(out, "again").scaling.factor == 2.0);
}

TEST_CASE("every family's written config parses back to the same architecture", "[core][model]") {
  const json configs[] = {
      {{"model_type", "gpt2"}, {"vocab_size", 50}, {"n_embd", 16}, {"n_layer", 1}, {"n_head", 2}},
      {{"model_type", "gptj"}, {"vocab_size", 50}, {"n_embd", 16}, {"n_layer", 1}, {"n_head", 2},
       {"rotary_dim", 4}},
      {{"model_type", "opt"}, {"vocab_size", 50}, {"hidden_size", 16}, {"num_hidden_layers", 1},
       {"num_attention_heads", 2}, {"word_embed_proj_dim", 8}, {"do_layer_norm_before", false}},
      {{"model_type", "mistral"}, {"vocab_size", 50}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"sliding_window", 3}},
      {{"model_type", "qwen2"}, {"vocab_size", 50}, {"hidden_size", 16}, {"num_hidden_layers", 3},
       {"num_attention_heads", 2}, {"use_sliding_window", true}, {"sliding_window", 5},
       {"max_window_layers", 1}},
  };
  for (const auto& j : configs) {
    const auto a = parse_config(j, "a");
    const auto b = parse_config(to_hf_json(a), "b");
    INFO(j.dump());
    CHECK(b.fam == a.fam);
    CHECK(b.hidden_size == a.hidden_size);
    CHECK(b.intermediate_size == a.intermediate_size);
    CHECK(b.num_kv_heads == a.num_kv_heads);
    CHECK(b.rotary_dim == a.rotary_dim);
    CHECK(b.sliding_window == a.sliding_window);
    CHECK(b.norm_before == a.norm_before);
    CHECK(b.word_embed_proj_dim == a.word_embed_proj_dim);
    CHECK(b.tie_word_embeddings == a.tie_word_embeddings);
    CHECK(b.pad_token_id == a.pad_token_id);
    CHECK(to_hf_json(b)["architectures"][0] == architecture_name(a.fam));
  }
}

TEST_CASE("family defaults follow transformers' config classes", "[core][model]") {
  const auto opt = parse_config({{"model_type", "opt"}, {"vocab_size", 50}, {"hidden_size", 16},
                                 {"num_hidden_layers", 1}, {"num_attention_heads", 2}}, "o");
  CHECK(opt.position_offset == 2);
  CHECK(opt.pad_token_id == std::optional<std::int64_t>(1));
  CHECK(opt.tie_word_embeddings);
  CHECK(opt.activation == "relu");
  const auto qwen = parse_config({{"model_type", "qwen2"}, {"vocab_size", 50}, {"hidden_size", 16},
                                  {"num_hidden_layers", 3}, {"num_attention_heads", 2},
                                  {"use_sliding_window", true}, {"sliding_window", 5},
                                  {"max_window_layers", 1}}, "q");
  CHECK(qwen.qkv_bias);
  CHECK_FALSE(qwen.o_bias);
  CHECK(qwen.sliding_window == std::vector<std::int64_t>{0, 5, 5});
  const auto gptj = parse_config({{"model_type", "gptj"}, {"vocab_size", 50}, {"n_embd", 16},
                                  {"n_layer", 1}, {"n_head", 2}, {"rotary_dim", 4}}, "j");
  CHECK(gptj.parallel_residual);
  CHECK(gptj.lm_head_bias);
  CHECK(gptj.rotary == rotary_style::interleaved);
  CHECK_FALSE(gptj.tie_word_embeddings);
}

TEST_CASE("malformed configs are refused naming the file and the key", "[core][model]") {
  json j = llama_json();
  j.erase("hidden_size");
  auto m = refusal(j);
  CHECK_THAT(m, Catch::Contains("/x/config.json") && Catch::Contains("hidden_size"));

  j = llama_json();
  j["num_attention_heads"] = "4";
  CHECK_THAT(refusal(j), Catch::Contains("num_attention_heads") && Catch::Contains("integer"));

  j = llama_json();
  j["tie_word_embeddings"] = 1;
  CHECK_THAT(refusal(j), Catch::Contains("tie_word_embeddings"));

  j = llama_json();
  j["model_type"] = "bert";
  CHECK_THAT(refusal(j), Catch::Contains("unknown model_type 'bert'"));

  j = llama_json();
  j.erase("model_type");
  CHECK_THAT(refusal(j), Catch::Contains("model_type"));

  j = llama_json();
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THAT(refusal(j), Catch::Contains("yarn"));

  j = llama_json();
  j["num_key_value_heads"] = 3;
  CHECK_THAT(refusal(j), Catch::Contains("num_key_value_heads"));

  j = llama_json();
  j["hidden_act"] = "tanh";
  CHECK_THAT(refusal(j), Catch::Contains("activation 'tanh'"));

  j = {{"model_type", "mistral"}, {"vocab_size", 50}, {"hidden_size", 16}, {"num_hidden_layers", 2},
       {"num_attention_heads", 2}, {"sliding_window", 3}, {"layer_types", {"full_attention"}}};
  CHECK_THAT(refusal(j), Catch::Contains("layer_types"));

  CHECK_THAT(refusal(json::array()), Catch::Contains("not a JSON object"));
}

TEST_CASE("a config file that is not JSON is refused naming the file", "[core][model]") {
  cohort::test::temp_dir dir;
  cohort::test::write_file(dir.path("config.json"), "{\"model_type\": \"llama\",");
  try {
    read_config(dir.str());
    FAIL("accepted");
  } catch (const model_error& e) {
    CHECK(e.code() == model_errc::bad_config);
    CHECK_THAT(e.what(), Catch::Contains(dir.path("config.json")) && Catch::Contains("not valid JSON"));
  }
  CHECK_THROWS_WITH(read_config(dir.path("absent")), Catch::Contains("cannot open"));
}
