// Small Mistral/Qwen2/OPT/GPT-J/GPT-2/Llama configs build, run, save and reload; behaviours that
// follow from the architecture (sliding window, padding row, tying, GQA) hold.
#include <torch/utils.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/torch_compat.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

// libtorch pulls in glog, whose CHECK would shadow Catch's: Catch comes last.
#undef CHECK
#include <catch2/catch.hpp>

using namespace cohort::core::model;
using cohort::test::temp_dir;
using cohort::test::family_configs;
using nlohmann::json;

namespace {

torch::Tensor random_ids(std::int64_t vocab, std::int64_t B, std::int64_t T) {
  return torch::randint(vocab, {B, T}, torch::kInt64);
}

}  // namespace

TEST_CASE("every family builds, runs forward and backward, saves and reloads exactly",
          "[core][model]") {
  torch::manual_seed(7);
  for (const auto& j : family_configs()) {
    INFO(j.dump());
    const auto cfg = parse_config(j, "test");
    decoder model(cfg);
    auto ids = random_ids(cfg.vocab_size, 2, 9);
    auto out = model->forward(ids, ids);
    CHECK(out.logits.sizes() == torch::IntArrayRef({2, 9, cfg.vocab_size}));
    CHECK(torch::isfinite(out.logits).all().item<bool>());
    CHECK(std::abs(out.loss.item<double>() - std::log(40.0)) < 1.0);  // near-uniform at init
    out.loss.backward();
    for (const auto& p : model->hf_parameters()) {
      INFO(p.name);
      CHECK(p.tensor.grad().defined());
    }
    temp_dir dir;
    save_hf_model(*model, dir.str());
    auto again = load_hf_model(dir.str());
    model->eval();
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(again->forward(ids).logits, model->forward(ids).logits));
    CHECK(again->parameter_count() == model->parameter_count());
  }
}

TEST_CASE("weights are listed once under their Hugging Face names", "[core][model]") {
  const auto names = [](const json& j) {
    std::vector<std::string> out;
    decoder model(parse_config(j, "t"));
    for (const auto& p : model->hf_parameters()) out.push_back(p.name);
    return out;
  };
  const auto cfgs = family_configs();
  const auto gpt2 = names(cfgs[0]);
  CHECK(gpt2.front() == "transformer.wte.weight");
  CHECK(std::count(gpt2.begin(), gpt2.end(), "transformer.h.1.attn.c_attn.weight") == 1);
  CHECK(std::count(gpt2.begin(), gpt2.end(), "lm_head.weight") == 0);  // tied
  const auto llama = names(cfgs[1]);
  CHECK(std::count(llama.begin(), llama.end(), "model.layers.0.mlp.gate_proj.weight") == 1);
  CHECK(std::count(llama.begin(), llama.end(), "lm_head.weight") == 0);
  const auto qwen = names(cfgs[3]);
  CHECK(std::count(qwen.begin(), qwen.end(), "model.layers.0.self_attn.k_proj.bias") == 1);
  CHECK(std::count(qwen.begin(), qwen.end(), "model.layers.0.self_attn.o_proj.bias") == 0);
  CHECK(std::count(qwen.begin(), qwen.end(), "lm_head.weight") == 1);
  const auto opt = names(cfgs[4]);
  CHECK(std::count(opt.begin(), opt.end(), "model.decoder.project_in.weight") == 1);
  CHECK(std::count(opt.begin(), opt.end(), "model.decoder.final_layer_norm.weight") == 0);  // post-norm
  const auto gptj = names(cfgs[5]);
  CHECK(std::count(gptj.begin(), gptj.end(), "lm_head.bias") == 1);
  CHECK(std::count(gptj.begin(), gptj.end(), "transformer.h.0.ln_2.weight") == 0);
  // GPT-2's Conv1D weights stay (in, out).
  decoder g(parse_config(cfgs[0], "t"));
  CHECK(g->hf_tensor("transformer.h.0.attn.c_attn.weight").sizes() == torch::IntArrayRef({16, 48}));
  CHECK_THROWS_AS(g->hf_tensor("nope"), model_error);
}

TEST_CASE("dropout from the config applies in training mode only", "[core][model]") {
  torch::manual_seed(5);
  json j = family_configs()[0];  // gpt2: embd/attn/resid dropout default to 0.1
  const auto cfg = parse_config(j, "t");
  CHECK(cfg.embed_dropout == 0.1);
  CHECK(cfg.attention_dropout == 0.1);
  decoder model(cfg);
  auto ids = random_ids(40, 2, 8);
  torch::NoGradGuard no_grad;
  CHECK_FALSE(torch::equal(model->forward(ids).logits, model->forward(ids).logits));
  model->eval();
  CHECK(torch::equal(model->forward(ids).logits, model->forward(ids).logits));
  j["embd_pdrop"] = j["attn_pdrop"] = j["resid_pdrop"] = 0.0;
  decoder plain(parse_config(j, "t"));  // training mode, but nothing to drop
  CHECK(torch::equal(plain->forward(ids).logits, plain->forward(ids).logits));
  j["attn_pdrop"] = 1.5;
  CHECK_THROWS_WITH(parse_config(j, "t"), Catch::Contains("attn_pdrop"));
}

TEST_CASE("a sliding window hides tokens further back than the window", "[core][model]") {
  torch::manual_seed(3);
  json j = family_configs()[2];  // mistral, window 3
  j["num_hidden_layers"] = 1;
  decoder model(parse_config(j, "t"));
  torch::NoGradGuard no_grad;
  auto ids = random_ids(40, 1, 8);
  auto changed = ids.clone();
  changed[0][1] = (ids[0][1].item<std::int64_t>() + 1) % 40;
  auto a = model->forward(ids).logits, b = model->forward(changed).logits;
  // Position t sees t-2..t: positions 1..3 change, 4.. do not.
  CHECK_FALSE(torch::allclose(a.select(1, 3), b.select(1, 3)));
  CHECK(torch::equal(a.slice(1, 4), b.slice(1, 4)));
  CHECK(torch::equal(a.select(1, 0), b.select(1, 0)));
}

TEST_CASE("the padding token's embedding row gets no gradient", "[core][model]") {
  json j = family_configs()[1];
  j["pad_token_id"] = 0;
  decoder model(parse_config(j, "t"));
  auto ids = torch::tensor({{0, 5, 0, 7}}, torch::kInt64);
  model->forward(ids, ids).loss.backward();
  auto g = model->hf_tensor("model.embed_tokens.weight").grad();
  // Tied: row 0 still gets the lm_head's gradient, but none through the embedding lookup.
  json untied_json = family_configs()[2];
  untied_json["pad_token_id"] = 0;
  decoder untied(parse_config(untied_json, "t"));
  untied->forward(ids, ids).loss.backward();
  auto gu = untied->hf_tensor("model.embed_tokens.weight").grad();
  CHECK(gu[0].abs().sum().item<double>() == 0.0);
  CHECK(gu[5].abs().sum().item<double>() > 0.0);
  CHECK(g[0].abs().sum().item<double>() > 0.0);
}

TEST_CASE("fused and explicit attention agree, causal and windowed", "[core][model]") {
  torch::manual_seed(11);
  auto q = torch::randn({2, 3, 7, 8}), k = torch::randn({2, 3, 7, 8}), v = torch::randn({2, 3, 7, 8});
  const torch::Tensor none;
  CHECK(torch::allclose(compat::attention(q, k, v, none, 0.3), compat::attention_math(q, k, v, none, 0.3),
                        1e-5, 1e-6));
  auto idx = torch::arange(7);
  auto diff = idx.view({7, 1}) - idx.view({1, 7});
  auto window = diff.ge(0).logical_and(diff.lt(2));
  auto out = compat::attention(q, k, v, window, 0.3);
  CHECK(torch::allclose(out, compat::attention_math(q, k, v, window, 0.3), 1e-5, 1e-6));
  // Window 2: position 0 sees only itself, so its output is v at 0.
  CHECK(torch::allclose(out.select(2, 0), v.select(2, 0), 1e-6, 1e-6));
}

TEST_CASE("one GEMM for q, k and v computes what three do, forward and backward, and the weights "
          "stay three", "[core][model]") {
  int separate = 0;
  for (const auto& j : family_configs()) {
    INFO(j.dump());
    const auto cfg = parse_config(j, "test");
    torch::manual_seed(5);
    decoder model(cfg);
    const auto& attn = model->layers()[0]->attn;
    if (!attn->q) continue;  // GPT-2's Conv1D is one projection already
    ++separate;
    CHECK(attn->fuse_qkv);  // the default
    auto ids = random_ids(cfg.vocab_size, 2, 9);
    const auto run = [&](bool fused) {
      for (auto layer : model->layers()) layer->attn->fuse_qkv = fused;  // holders share the module
      model->zero_grad();
      auto out = model->forward(ids, ids);
      out.loss.backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : model->hf_parameters()) grads.push_back(p.tensor.grad().clone());
      return std::make_pair(out.logits.detach(), grads);
    };
    model->eval();  // no dropout: both runs draw nothing
    const auto [fused_logits, fused_grads] = run(true);
    const auto [plain_logits, plain_grads] = run(false);
    CHECK(torch::allclose(fused_logits, plain_logits, 1e-5, 1e-6));
    REQUIRE(fused_grads.size() == plain_grads.size());
    for (std::size_t i = 0; i < fused_grads.size(); ++i) {
      INFO(model->hf_parameters()[i].name);
      CHECK(torch::allclose(fused_grads[i], plain_grads[i], 1e-4, 1e-6));
    }
  }
  CHECK(separate >= 3);  // Llama, Mistral, Qwen2 at least
}

TEST_CASE("bad input ids are refused with their position", "[core][model]") {
  decoder model(parse_config(family_configs()[0], "t"));
  CHECK_THROWS_WITH(model->forward(torch::tensor({{1, 2, 40}}, torch::kInt64)),
                    Catch::Contains("input_ids[0][2] = 40") && Catch::Contains("vocabulary"));
  CHECK_THROWS_WITH(model->forward(torch::zeros({1, 17}, torch::kInt64)),
                    Catch::Contains("at most 16"));
  CHECK_THROWS_WITH(model->forward(torch::zeros({1, 4}, torch::kInt64),
                                   torch::full({1, 4}, -5, torch::kInt64)),
                    Catch::Contains("labels[0][0] = -5"));
}

TEST_CASE("a model can be built on the meta device to count parameters", "[core][model]") {
  const auto cfg = parse_config(family_configs()[1], "t");
  decoder meta(cfg, torch::TensorOptions().device(torch::kMeta), false);
  decoder real(cfg);
  CHECK(meta->parameter_count() == real->parameter_count());
  // llama tied: embed 40*16, per layer 2 norms + q(16x16) k,v(8x16) o(16x16) + 3 mlp (24x16), final norm
  CHECK(real->parameter_count() == 40 * 16 + 2 * (2 * 16 + 256 + 2 * 128 + 256 + 3 * 384) + 16);
}
