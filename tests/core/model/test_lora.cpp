// LoRA adapters on the decoder: a zero B leaves the base's logits as they are, only the adapters
// get gradients, both compute paths apply them per original module, a frozen bf16 base runs under
// fp32 adapters, and targets the family does not have are refused by name.
#include <torch/cuda.h>
#include <torch/utils.h>

#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/lora_config.hpp"
#include "core/model/model_error.hpp"
#include "core/model/weight_source.hpp"
#include "tests/core/model/model_test_support.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;
using cohort::test::family_configs;

namespace {

const std::vector<std::string> llama_targets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};

lora_config lora_of(std::vector<std::string> targets, std::int64_t r = 4, double alpha = 8) {
  lora_config c;
  c.r = r;
  c.alpha = alpha;
  c.target_modules = std::move(targets);
  return c;
}

// Fills the adapters as the engine starts them (A random, B zero); with `random_b`, B too.
void init_adapters(decoder_impl& model, std::uint64_t seed, bool random_b) {
  torch::NoGradGuard no_grad;
  const auto source = lora_init(model.lora_parameters(), seed);
  for (const auto& p : model.lora_parameters()) {
    auto t = p.tensor;
    fill_parameter(*source, p.name, t);
    if (random_b && p.name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.5);
  }
}

torch::Tensor fixture_ids() {
  const auto ref = cohort::test::read_json(cohort::test::shared_fixture("tiny-llama") + "/reference.json");
  return torch::tensor(ref["input_ids"].get<std::vector<std::vector<std::int64_t>>>()[0], torch::kInt64).view({1, -1});
}

}  // namespace

TEST_CASE("a LoRA model whose B is zero computes the base model's logits on both compute paths",
          "[core][model][lora]") {
  const auto dir = cohort::test::shared_fixture("tiny-llama");
  auto base = load_hf_model(dir, {torch::kFloat});
  auto adapted = load_hf_model(dir, {torch::kFloat});
  adapted->add_lora(lora_of(llama_targets), torch::kFloat);
  init_adapters(*adapted, 3, false);
  const auto ids = fixture_ids();
  torch::NoGradGuard no_grad;
  for (const auto path : {compute_path::plain, compute_path::fused}) {
    INFO(compute_path_name(path));
    base->set_compute_path(path);
    adapted->set_compute_path(path);
    CHECK(torch::equal(adapted->forward(ids).logits, base->forward(ids).logits));
  }
}

TEST_CASE("only the LoRA adapters get gradients; the base is frozen", "[core][model][lora]") {
  auto model = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
  model->train();
  model->add_lora(lora_of({"q_proj", "v_proj", "down_proj"}), torch::kFloat);
  init_adapters(*model, 5, true);
  REQUIRE(model->lora_parameters().size() == 2 * 3 * 2);  // A and B, 3 modules, 2 layers
  const auto ids = fixture_ids();
  model->forward(ids, ids).loss.backward();
  for (const auto& p : model->hf_parameters()) {
    INFO(p.name);
    CHECK_FALSE(p.tensor.requires_grad());
    CHECK_FALSE(p.tensor.grad().defined());
  }
  for (const auto& p : model->lora_parameters()) {
    INFO(p.name);
    REQUIRE(p.tensor.grad().defined());
    CHECK(p.tensor.grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("the fused compute path applies LoRA per original module as the plain path does",
          "[core][model][lora]") {
  auto model = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
  model->add_lora(lora_of(llama_targets), torch::kFloat);
  init_adapters(*model, 9, true);
  const auto ids = fixture_ids();
  torch::NoGradGuard no_grad;
  model->set_compute_path(compute_path::plain);
  const auto plain = model->forward(ids).logits;
  model->set_compute_path(compute_path::fused);
  const auto fused = model->forward(ids).logits;
  CHECK(torch::allclose(plain, fused, 1e-5, 1e-5));
  // The adapters do change the logits.
  auto base = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
  CHECK((base->forward(ids).logits - plain).abs().max().item<double>() > 1e-3);
}

namespace {

// "" where b is a up to 1e-4 of a's largest magnitude, plus 1e-5 (allclose's bounds, the relative
// one over the whole tensor: GEMMs that sum in another order on a GPU move entries that nearly
// cancel by more than their own size would suggest); else the figures.
std::string far_apart(const torch::Tensor& a, const torch::Tensor& b) {
  const double difference = (a - b).abs().max().item<double>();
  const double scale = a.abs().max().item<double>();
  if (difference <= 1e-4 * scale + 1e-5) return "";
  return "largest difference " + std::to_string(difference) + ", largest magnitude " + std::to_string(scale);
}

// A model of `json`'s family twice, the same weights and adapters: its frozen base filled weight by
// weight on the plain path, and loaded by load_frozen (with room) on the fused path, on `device`
// in fp32. Checks the room's layout and that both give the same logits and adapter gradients,
// twice, B moved between the two as an optimizer step moves it.
void check_room_against_plain(const nlohmann::json& json, const torch::Device& device) {
  const auto config = parse_config(json, "family config");
  INFO(family_name(config.fam));
  std::vector<decoder> models;
  for (int i = 0; i < 2; ++i) {
    decoder model(config, torch::TensorOptions(), /*initialize=*/false);
    model->add_lora(lora_of(lora_module_names(config.fam)), torch::kFloat);
    const auto base = seeded_init(config, model->hf_parameters(), 7);
    if (i == 0) {
      for (const auto& p : model->hf_parameters()) {
        auto t = p.tensor;
        fill_parameter(*base, p.name, t);
      }
      model->to(device);
    } else {
      model->to(device);
      model->load_frozen(*base, torch::kFloat, device);
    }
    init_adapters(*model, 9, true);
    if (i == 1) {
      torch::NoGradGuard no_grad;  // B drawn once
      for (std::size_t k = 0; k < model->lora_parameters().size(); ++k)
        model->lora_parameters()[k].tensor.copy_(models[0]->lora_parameters()[k].tensor);
    }
    model->set_compute_path(i == 0 ? compute_path::plain : compute_path::fused);
    model->eval();  // no dropout masks to differ
    models.push_back(model);
  }
  torch::manual_seed(4);
  {
    torch::NoGradGuard no_grad;  // biases that are not zero, the same in both
    for (std::size_t i = 0; i < models[0]->hf_parameters().size(); ++i) {
      const auto& p = models[0]->hf_parameters()[i];
      if (p.name.size() < 5 || p.name.substr(p.name.size() - 4) != "bias") continue;
      const auto noise = torch::randn_like(p.tensor);
      p.tensor.add_(noise);
      models[1]->hf_parameters()[i].tensor.add_(noise);
    }
  }
  // The layout: q, k, v's rows (hidden 16 + 3 adapters of rank 4, rounded up to 64) apart, k's
  // right after q's; gate, up's alike. GPT-2's Conv1D c_attn has no room.
  const auto& attn = models[1]->layers()[0]->attn;
  const bool separate_qkv = !attn->qkv;
  CHECK(separate_qkv == (config.fam != family::gpt2));
  if (separate_qkv) {
    CHECK(attn->q->lora_room);
    CHECK(attn->q->weight.stride(0) == 64);
    CHECK(attn->k->weight.data_ptr<float>() ==
          attn->q->weight.data_ptr<float>() + attn->q->out_features * 64);
    CHECK(torch::equal(attn->v->weight, models[0]->layers()[0]->attn->v->weight));
  }
  const auto& ffn = models[1]->layers()[1]->ffn;
  if (ffn->gate) CHECK(ffn->up->weight.stride(0) == 64);
  const auto ids = torch::randint(0, 40, {2, 8}, torch::kInt64).to(device);
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    std::vector<torch::Tensor> logits;
    for (auto& model : models) logits.push_back(model->forward(ids).logits);
    CHECK(far_apart(logits[0], logits[1]) == "");
    const auto g = torch::randn_like(logits[0]);
    for (auto& l : logits) l.backward(g);
    const auto& adapters = models[0]->lora_parameters();
    for (std::size_t i = 0; i < adapters.size(); ++i) {
      INFO(adapters[i].name);
      const auto& other = models[1]->lora_parameters()[i].tensor;
      CHECK(far_apart(adapters[i].tensor.grad(), other.grad()) == "");
    }
    // B moves, as an optimizer step moves it: the next forward writes the new B into the room.
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < adapters.size(); ++i) {
      const auto noise = torch::randn_like(adapters[i].tensor) * 0.25;
      for (auto& model : models) {
        auto t = model->lora_parameters()[i].tensor;
        t.mutable_grad() = torch::Tensor();
        if (adapters[i].name.find("lora_B") != std::string::npos) t.add_(noise);
      }
    }
  }
}

}  // namespace

TEST_CASE(
    "a frozen base loaded with room for its adapters gives the plain path's logits and adapter "
    "gradients on the fused path, after B moves too",
    "[core][model][lora]") {
  for (const auto& json : cohort::test::family_configs()) check_room_against_plain(json, torch::kCPU);
}

TEST_CASE("a frozen base held in another dtype than the activations is laid out without room",
          "[core][model][lora]") {
  const auto config = parse_config(cohort::test::family_configs()[1], "family config");
  decoder model(config, torch::TensorOptions(), /*initialize=*/false);
  model->add_lora(lora_of(lora_module_names(config.fam)), torch::kFloat);
  model->load_frozen(*seeded_init(config, model->hf_parameters(), 7), torch::kBFloat16, torch::kCPU);
  const auto& q = model->layers()[0]->attn->q;
  CHECK_FALSE(q->lora_room);
  CHECK(q->weight.is_contiguous());
  CHECK(q->weight.scalar_type() == torch::kBFloat16);
}

TEST_CASE(
    "on a GPU, a frozen base with room for its adapters gives the plain path's logits and "
    "adapter gradients (the GEMMs' strided operands and outputs)",
    "[core][model][lora][.gpu]") {
  if (!torch::cuda::is_available()) FAIL("this test needs a CUDA device");
  for (const auto& json : cohort::test::family_configs()) check_room_against_plain(json, torch::kCUDA);
}

TEST_CASE("LoRA names its adapters after the module, A (r, in) and B (out, r), GPT-2's c_proj twice",
          "[core][model][lora]") {
  auto llama = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
  llama->add_lora(lora_of({"q_proj", "down_proj"}, 4), torch::kFloat);
  const auto& p = llama->lora_parameters();
  REQUIRE(p.size() == 8);
  CHECK(p[0].name == "model.layers.0.self_attn.q_proj.lora_A.weight");
  CHECK(p[0].tensor.sizes() == torch::IntArrayRef({4, 64}));
  CHECK(p[1].name == "model.layers.0.self_attn.q_proj.lora_B.weight");
  CHECK(p[1].tensor.sizes() == torch::IntArrayRef({64, 4}));
  CHECK(p[2].name == "model.layers.0.mlp.down_proj.lora_A.weight");
  CHECK(p[2].tensor.sizes() == torch::IntArrayRef({4, 160}));
  CHECK(p[7].name == "model.layers.1.mlp.down_proj.lora_B.weight");
  CHECK(p[7].layer == 1);

  decoder gpt2(parse_config(family_configs()[0], "gpt2"));  // n_embd 16, Conv1D weights (in, out)
  gpt2->add_lora(lora_of({"c_attn", "c_proj"}, 2), torch::kFloat);
  std::vector<std::string> names;
  for (const auto& q : gpt2->lora_parameters()) names.push_back(q.name);
  CHECK(names.size() == 2 * 3 * 2);
  CHECK(names[0] == "transformer.h.0.attn.c_attn.lora_A.weight");
  CHECK(gpt2->lora_parameters()[1].tensor.sizes() == torch::IntArrayRef({48, 2}));  // B (out, r)
  CHECK(names[2] == "transformer.h.0.attn.c_proj.lora_A.weight");
  CHECK(names[4] == "transformer.h.0.mlp.c_proj.lora_A.weight");
  CHECK(gpt2->lora_parameters()[4].tensor.sizes() == torch::IntArrayRef({2, 64}));  // A (r, in=4·16)
}

TEST_CASE("LoRA on GPT-2's Conv1D weights equals the merged weight W + s·(BA)ᵀ", "[core][model][lora]") {
  const auto cfg = parse_config(family_configs()[0], "gpt2");
  torch::manual_seed(11);
  decoder model(cfg);
  model->eval();
  model->add_lora(lora_of({"c_attn", "c_proj", "c_fc"}, 2, 6), torch::kFloat);
  init_adapters(*model, 2, true);
  const auto ids = torch::randint(cfg.vocab_size, {2, 7}, torch::kInt64);
  torch::NoGradGuard no_grad;
  const auto adapted = model->forward(ids).logits;
  decoder merged(cfg);
  merged->eval();
  for (std::size_t i = 0; i < model->hf_parameters().size(); ++i) {
    const auto& p = model->hf_parameters()[i];
    auto w = p.tensor.clone();
    const auto module = module_of_weight(p.name);
    for (std::size_t j = 0; j + 1 < model->lora_parameters().size(); j += 2) {
      const auto& a = model->lora_parameters()[j];
      if (module_of_adapter(a.name) != module || module == p.name) continue;
      w += 3.0 * torch::mm(model->lora_parameters()[j + 1].tensor, a.tensor).t();  // alpha / r = 3
    }
    merged->hf_parameters()[i].tensor.copy_(w);
  }
  CHECK(torch::allclose(merged->forward(ids).logits, adapted, 1e-5, 1e-5));
}

TEST_CASE(
    "the fused path's grouped adapters (one A GEMM, each B added onto its own columns) give "
    "the plain path's loss and adapter gradients, with every target and with some",
    "[core][model][lora]") {
  for (const auto& targets :
       {llama_targets, std::vector<std::string>{"q_proj", "v_proj", "up_proj", "down_proj"}}) {
    INFO(targets.size() << " targets");
    std::vector<torch::Tensor> losses;
    std::vector<std::vector<torch::Tensor>> grads;
    for (auto path : {compute_path::plain, compute_path::fused}) {
      auto model = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
      model->add_lora(lora_of(targets), torch::kFloat);
      torch::manual_seed(5);  // B drawn alike for both paths
      init_adapters(*model, 9, true);
      model->train();  // dropout 0: the grouped form applies in training too
      model->set_compute_path(path);
      const auto ids = fixture_ids();
      const auto loss = model->forward(ids, ids).loss;
      loss.backward();
      losses.push_back(loss.detach());
      grads.emplace_back();
      for (const auto& p : model->lora_parameters()) grads.back().push_back(p.tensor.grad().clone());
    }
    INFO(losses[0].item<double>() << " " << losses[1].item<double>());
    CHECK(torch::allclose(losses[0], losses[1], 1e-5, 1e-6));
    REQUIRE(grads[0].size() == grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      INFO("adapter tensor " << i);
      CHECK(torch::allclose(grads[0][i], grads[1][i], 1e-4, 1e-6));
      CHECK(grads[1][i].abs().max().item<double>() > 0);
    }
  }
}

TEST_CASE("a frozen bf16 base runs under fp32 adapters", "[core][model][lora]") {
  const auto dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir, {torch::kBFloat16});
  model->add_lora(lora_of(llama_targets), torch::kFloat);
  init_adapters(*model, 3, true);
  model->train();
  const auto ids = fixture_ids();
  const auto out = model->forward(ids, ids);
  CHECK(out.logits.scalar_type() == torch::kFloat);
  out.loss.backward();
  for (const auto& p : model->lora_parameters()) CHECK(p.tensor.grad().scalar_type() == torch::kFloat);
  for (const auto& p : model->hf_parameters()) CHECK(p.tensor.scalar_type() == torch::kBFloat16);
  // Close to the fp32 base with the same adapters (bf16 weights: ~3 significant digits).
  auto fp32 = load_hf_model(dir, {torch::kFloat});
  fp32->add_lora(lora_of(llama_targets), torch::kFloat);
  for (std::size_t i = 0; i < fp32->lora_parameters().size(); ++i) {
    torch::NoGradGuard no_grad;
    fp32->lora_parameters()[i].tensor.copy_(model->lora_parameters()[i].tensor);
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const double diff = (model->forward(ids).logits - fp32->forward(ids).logits).abs().max().item<double>();
  CHECK(diff < 0.1);
}

TEST_CASE("LoRA targets a family does not have are refused, naming the field and the allowed names",
          "[core][model][lora]") {
  decoder gpt2(parse_config(family_configs()[0], "gpt2"));
  try {
    gpt2->add_lora(lora_of({"c_attn", "q_proj"}), torch::kFloat);
    FAIL("q_proj was accepted for GPT-2");
  } catch (const model_error& e) {
    const std::string what = e.what();
    CHECK(what.find("model.lora.target_modules") != std::string::npos);
    CHECK(what.find("'q_proj'") != std::string::npos);
    CHECK(what.find("c_attn, c_proj, c_fc") != std::string::npos);
  }
  CHECK_FALSE(gpt2->has_lora());
  decoder llama(parse_config(family_configs()[1], "llama"));
  CHECK_THROWS_WITH(llama->add_lora(lora_of({"q_proj"}, 0), torch::kFloat),
                    Catch::Contains("model.lora.r"));
}

TEST_CASE("lora_init draws A in ±1/√in and B zero, the same for any read split", "[core][model][lora]") {
  auto model = load_hf_model(cohort::test::shared_fixture("tiny-llama"), {torch::kFloat});
  model->add_lora(lora_of({"up_proj"}, 8), torch::kFloat);
  const auto source = lora_init(model->lora_parameters(), 42);
  const auto& a = model->lora_parameters()[0];  // (8, 64)
  auto whole = torch::empty({a.tensor.numel()}, torch::kFloat);
  source->read(a.name, 0, whole);
  CHECK(whole.abs().max().item<double>() <= 1.0 / std::sqrt(64.0));
  CHECK(whole.std().item<double>() > 0.5 / std::sqrt(3.0 * 64.0));  // uniform: bound/√3
  auto tail = torch::empty({100}, torch::kFloat);
  source->read(a.name, 50, tail);
  CHECK(torch::equal(tail, whole.slice(0, 50, 150)));
  auto b = torch::empty({model->lora_parameters()[1].tensor.numel()}, torch::kFloat);
  source->read(model->lora_parameters()[1].name, 0, b);
  CHECK(b.abs().max().item<double>() == 0);
  auto other = torch::empty({a.tensor.numel()}, torch::kFloat);
  lora_init(model->lora_parameters(), 43)->read(a.name, 0, other);
  CHECK_FALSE(torch::equal(other, whole));
}

TEST_CASE("peft's adapter_config.json carries peft's keys", "[core][model][lora]") {
  lora_config c = lora_of({"c_attn"}, 8, 16);
  c.dropout = 0.05;
  c.base = "/models/gpt2";
  const auto j = peft_adapter_config(c, parse_config(family_configs()[0], "gpt2"));
  CHECK(j["peft_type"] == "LORA");
  CHECK(j["task_type"] == "CAUSAL_LM");
  CHECK(j["r"] == 8);
  CHECK(j["lora_alpha"] == 16.0);
  CHECK(j["lora_dropout"] == 0.05);
  CHECK(j["target_modules"] == nlohmann::json::array({"c_attn"}));
  CHECK(j["base_model_name_or_path"] == "/models/gpt2");
  CHECK(j["bias"] == "none");
  CHECK(j["fan_in_fan_out"] == true);
  CHECK(peft_adapter_config(c, parse_config(family_configs()[1], "llama"))["fan_in_fan_out"] == false);
  const auto back = lora_from_json(lora_to_json(c), "test");
  CHECK(back.target_modules == c.target_modules);
  CHECK(back.alpha == 16.0);
  CHECK(back.base == c.base);
}
