// Weight sources: slices of Hugging Face safetensors equal what load_hf_model loads; a seeded
// initialisation gives the same weights whatever the partition into ranks, with transformers'
// _init_weights statistics; fill_parameter streams a whole tensor into any dtype.
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include <torch/utils.h>

#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/weight_source.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;
using cohort::test::temp_dir;
using nlohmann::json;

namespace {

decoder meta_model(const model_config& cfg) {
  return decoder(cfg, torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta));
}

torch::Tensor read_slice(const weight_source& src, const std::string& name, std::int64_t begin,
                         std::int64_t count) {
  auto out = torch::empty({count}, torch::kFloat);
  src.read(name, begin, out);
  return out;
}

// Reads every parameter whole.
std::vector<torch::Tensor> read_all(const weight_source& src, const std::vector<hf_parameter>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(read_slice(src, p.name, 0, p.tensor.numel()));
  return out;
}

// Checks that every parameter read whole and in random slices equals `reference` (same order).
void check_slices(const weight_source& src, const std::vector<hf_parameter>& params,
                  const std::vector<torch::Tensor>& reference) {
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].name);
    const auto want = reference[i].reshape({-1});
    const std::int64_t n = want.numel();
    CHECK(torch::equal(read_slice(src, params[i].name, 0, n), want));
    for (int k = 0; k < 5; ++k) {
      const std::int64_t a = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n + 1));
      const std::int64_t b = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n + 1));
      const std::int64_t lo = std::min(a, b), len = std::max(a, b) - lo;
      CHECK(torch::equal(read_slice(src, params[i].name, lo, len), want.narrow(0, lo, len)));
    }
  }
}

std::vector<torch::Tensor> tensors_of(const decoder& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->hf_parameters()) out.push_back(p.tensor);
  return out;
}

// A llama whose token embedding (33000 x 64) spans three 2^20-element chunks, with a padding row.
model_config big_llama() {
  return parse_config({{"model_type", "llama"}, {"vocab_size", 33000}, {"hidden_size", 64},
                       {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                       {"num_key_value_heads", 2}, {"intermediate_size", 96},
                       {"pad_token_id", 5}, {"initializer_range", 0.05}},
                      "big-llama");
}

// Writes `model`'s fp32 weights, with `edit` applied to the list, as OUT/model.safetensors.
void write_edited(const temp_dir& out, const decoder& model,
                  const std::function<void(std::vector<tensor_blob>&)>& edit) {
  std::vector<tensor_blob> blobs;
  for (const auto& p : model->hf_parameters()) {
    blobs.push_back({p.name, "F32", p.tensor.sizes().vec(), p.tensor.data_ptr(),
                     static_cast<std::size_t>(p.tensor.numel() * 4)});
  }
  edit(blobs);
  write_safetensors(out.path("model.safetensors"), blobs);
}

}  // namespace

TEST_CASE("a Hugging Face weight source reads any slice of a tensor as load_hf_model loads it",
          "[core][model]") {
  for (const auto& dir :
       {cohort::test::shared_fixture("tiny-llama"), cohort::test::shared_fixture("tiny-gpt2"),
        cohort::test::local_fixture("gptj"),  // four shards and an index
        cohort::test::local_fixture("opt"), cohort::test::local_fixture("qwen2")}) {  // F16, BF16
    INFO(dir);
    load_options fp32;
    fp32.dtype = torch::kFloat;
    auto model = load_hf_model(dir, fp32);
    auto meta = meta_model(read_config(dir));
    auto src = open_hf_weights(dir, meta->hf_parameters());
    check_slices(*src, meta->hf_parameters(), tensors_of(model));
  }
}

TEST_CASE("a Hugging Face weight source reads shards that save_hf_model split by an index",
          "[core][model]") {
  const std::string dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir);
  temp_dir out;
  save_options so;
  so.max_shard_bytes = 200'000;
  save_hf_model(*model, out.str(), so);
  REQUIRE(std::filesystem::exists(out.path("model.safetensors.index.json")));
  auto meta = meta_model(model->config());
  check_slices(*open_hf_weights(out.str(), meta->hf_parameters()), meta->hf_parameters(),
               tensors_of(model));
}

TEST_CASE("bf16 and f16 safetensors read back as their exact fp32 conversion", "[core][model]") {
  const std::string dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir);
  auto meta = meta_model(model->config());
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO(c10::toString(dtype));
    temp_dir out;
    save_options so;
    so.dtype = dtype;
    save_hf_model(*model, out.str(), so);
    std::vector<torch::Tensor> want;
    for (const auto& t : tensors_of(model)) want.push_back(t.to(dtype).to(torch::kFloat));
    CHECK_FALSE(torch::equal(want.front(), model->hf_parameters().front().tensor));  // it rounds
    check_slices(*open_hf_weights(out.str(), meta->hf_parameters()), meta->hf_parameters(), want);
  }
}

TEST_CASE("a Hugging Face weight source refuses missing or misshapen tensors and bad ranges",
          "[core][model]") {
  const std::string dir = cohort::test::shared_fixture("tiny-llama");
  auto model = load_hf_model(dir);
  auto meta = meta_model(model->config());
  const auto& params = meta->hf_parameters();
  const auto refusal = [&](const std::function<void(std::vector<tensor_blob>&)>& edit) {
    temp_dir out;
    write_edited(out, model, edit);
    try {
      open_hf_weights(out.str(), params);
    } catch (const model_error& e) {
      CHECK(e.code() == model_errc::bad_weights);
      CHECK_THAT(e.what(), Catch::Contains(out.path("model.safetensors")));
      return std::string(e.what());
    }
    FAIL("accepted");
    return std::string();
  };
  CHECK_THAT(refusal([](auto& b) { b.erase(b.begin() + 3); }),
             Catch::Contains("missing tensor '" + params[3].name + "'"));
  CHECK_THAT(refusal([](auto& b) { std::swap(b[3].shape[0], b[3].shape[1]); }),
             Catch::Contains("'" + params[3].name + "' has shape") &&
                 Catch::Contains("but config.json implies"));
  CHECK_THAT(refusal([&](auto& b) {
               b.push_back({"model.layers.9.mlp.up_proj.weight", "F32", {1}, b[0].data, 4});
             }),
             Catch::Contains("unexpected tensor 'model.layers.9.mlp.up_proj.weight'"));

  // A redundant lm_head.weight (tied embeddings) and rotary buffers are ignored, as on load.
  auto tied_cfg = model->config();
  tied_cfg.tie_word_embeddings = true;
  auto tied = meta_model(tied_cfg);
  temp_dir extra;
  write_edited(extra, model, [&](auto& b) {
    b.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {1}, b[0].data, 4});
  });
  auto src = open_hf_weights(extra.str(), tied->hf_parameters());
  CHECK(torch::equal(read_slice(*src, "model.embed_tokens.weight", 0, 10),
                     model->hf_tensor("model.embed_tokens.weight").reshape({-1}).narrow(0, 0, 10)));

  auto good = open_hf_weights(dir, params);
  const std::string name = params[1].name;
  const std::int64_t n = params[1].tensor.numel();
  auto out = torch::empty({10}, torch::kFloat);
  CHECK_THROWS_WITH(good->read(name, n - 5, out),
                    Catch::Contains(dir + "/model.safetensors") &&
                        Catch::Contains("tensor '" + name + "'") &&
                        Catch::Contains("elements [" + std::to_string(n - 5) + ", " +
                                        std::to_string(n + 5) + ") run past its " +
                                        std::to_string(n) + " elements"));
  CHECK_THROWS_WITH(good->read(name, -1, out), Catch::Contains("run past"));
  CHECK_THROWS_WITH(good->read("lm_head.bias", 0, out),
                    Catch::Contains("no weight named 'lm_head.bias'"));
  auto half = torch::empty({10}, torch::kHalf);
  CHECK_THROWS_WITH(good->read(name, 0, half), Catch::Contains("1-D contiguous fp32 CPU"));
}

TEST_CASE("seeded weights are the same for any partition into ranks", "[core][model]") {
  const auto cfg = big_llama();
  auto meta = meta_model(cfg);
  const auto& params = meta->hf_parameters();
  auto src = seeded_init(cfg, params, 1234);
  const auto whole = read_all(*src, params);
  REQUIRE(params.front().tensor.numel() > 2 * seeded_init_chunk);
  for (const std::int64_t ranks : {1, 2, 3, 7}) {
    INFO(ranks);
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].name);
      const std::int64_t n = params[i].tensor.numel();
      const std::int64_t shard = (n + ranks - 1) / ranks;  // ZeRO's padded split: the last may be short
      auto assembled = torch::full({n}, -7.0f);
      for (std::int64_t r = 0; r < ranks; ++r) {
        const std::int64_t begin = std::min(n, r * shard), end = std::min(n, begin + shard);
        auto piece = assembled.narrow(0, begin, end - begin);
        src->read(params[i].name, begin, piece);
      }
      CHECK(torch::equal(assembled, whole[i]));
    }
  }
  // A second source of the same (config, seed) gives the same values; another seed others.
  const auto again = read_all(*seeded_init(cfg, params, 1234), params);
  const auto other = read_all(*seeded_init(cfg, params, 1235), params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].name);
    CHECK(torch::equal(again[i], whole[i]));
    if (params[i].tensor.dim() == 2) CHECK_FALSE(torch::equal(other[i], whole[i]));
  }
  // Distinct parameters of one shape draw distinct values, and chunks differ from each other.
  CHECK_FALSE(torch::equal(read_slice(*src, "model.layers.0.self_attn.k_proj.weight", 0, 64),
                           read_slice(*src, "model.layers.0.self_attn.v_proj.weight", 0, 64)));
  CHECK_FALSE(torch::equal(read_slice(*src, "model.embed_tokens.weight", 0, 64),
                           read_slice(*src, "model.embed_tokens.weight", seeded_init_chunk, 64)));
}

TEST_CASE("seeded weights have transformers' init statistics", "[core][model]") {
  const auto cfg = big_llama();
  auto meta = meta_model(cfg);
  auto src = seeded_init(cfg, meta->hf_parameters(), 99);
  const auto embed = read_slice(*src, "model.embed_tokens.weight", 0, 33000 * 64).view({33000, 64});
  CHECK(embed[5].abs().max().item<float>() == 0.0f);  // the padding row
  const auto rest = torch::cat({embed.slice(0, 0, 5), embed.slice(0, 6)}).to(torch::kDouble);
  CHECK(std::abs(rest.mean().item<double>()) < 0.05 * 0.01);
  CHECK(rest.std().item<double>() == Approx(0.05).epsilon(0.01));
  // Gaussian tails: about 4.55% beyond two standard deviations, none absurdly far.
  const double beyond = rest.abs().gt(0.1).to(torch::kDouble).mean().item<double>();
  CHECK(beyond == Approx(0.0455).epsilon(0.05));
  CHECK(rest.abs().max().item<double>() < 0.05 * 6.5);
  const auto lm = read_slice(*src, "lm_head.weight", 0, 33000 * 64).to(torch::kDouble);
  CHECK(lm.std().item<double>() == Approx(0.05).epsilon(0.01));
  CHECK(torch::equal(read_slice(*src, "model.norm.weight", 0, 64), torch::ones({64})));
}

TEST_CASE("seeded initialisation sets what decoder's initialisation sets in every family",
          "[core][model]") {
  auto configs = cohort::test::family_configs();
  configs[1]["pad_token_id"] = 3;  // llama, tied: the padding row of the shared embedding
  configs[4]["pad_token_id"] = 1;  // opt, as its checkpoints have it
  for (const auto& j : configs) {
    const auto cfg = parse_config(j, "family");
    INFO(family_name(cfg.fam));
    decoder real(cfg);  // normal weights, norms 1, biases 0, padding row 0
    auto meta = meta_model(cfg);
    auto src = seeded_init(cfg, meta->hf_parameters(), 5);
    const auto values = read_all(*src, meta->hf_parameters());
    REQUIRE(values.size() == real->hf_parameters().size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto& p = real->hf_parameters()[i];
      INFO(p.name);
      const auto want = p.tensor.detach().reshape({-1});
      // Exact where the decoder sets constants, random exactly where it draws.
      const auto constant = want.eq(0).logical_or(want.eq(1));
      CHECK(torch::equal(values[i].masked_select(constant), want.masked_select(constant)));
      CHECK(values[i].masked_select(constant.logical_not()).ne(0).all().item<bool>());
    }
  }
}

TEST_CASE("seeded initialisation refuses unknown names and ranges past a parameter",
          "[core][model]") {
  const auto cfg = parse_config(cohort::test::family_configs()[0], "gpt2");
  auto meta = meta_model(cfg);
  auto src = seeded_init(cfg, meta->hf_parameters(), 1);
  auto out = torch::empty({8}, torch::kFloat);
  CHECK_THROWS_WITH(src->read("transformer.ln_f.bias", 10, out),
                    Catch::Contains("parameter 'transformer.ln_f.bias'") &&
                        Catch::Contains("elements [10, 18) run past its 16 elements"));
  CHECK_THROWS_WITH(src->read("lm_head.weight", 0, out),
                    Catch::Contains("no parameter named 'lm_head.weight'"));  // tied: not listed
  auto two_d = torch::empty({2, 4}, torch::kFloat);
  CHECK_THROWS_WITH(src->read("transformer.wte.weight", 0, two_d),
                    Catch::Contains("1-D contiguous fp32 CPU"));
}

TEST_CASE("fill_parameter streams a whole parameter into a tensor of any dtype", "[core][model]") {
  const auto cfg = big_llama();
  auto meta = meta_model(cfg);
  auto src = seeded_init(cfg, meta->hf_parameters(), 3);
  for (const auto& p : meta->hf_parameters()) {
    INFO(p.name);
    const auto fp32 = read_slice(*src, p.name, 0, p.tensor.numel()).view(p.tensor.sizes());
    auto bf16 = torch::full(p.tensor.sizes(), 9.0, torch::kBFloat16);
    fill_parameter(*src, p.name, bf16);
    CHECK(torch::equal(bf16, fp32.to(torch::kBFloat16)));
    auto f32 = torch::empty(p.tensor.sizes(), torch::kFloat).requires_grad_();  // a leaf parameter
    fill_parameter(*src, p.name, f32);
    CHECK(torch::equal(f32.detach(), fp32));
  }
  auto strided = torch::empty({64, 64}, torch::kFloat).t();
  CHECK_THROWS_WITH(fill_parameter(*src, "model.layers.0.self_attn.q_proj.weight", strided),
                    Catch::Contains("contiguous"));
}

TEST_CASE("weight sources read fast enough for a 7B shard", "[core][model][.slow]") {
  // Not a correctness test: prints elements/s of a seeded read and of an fp32/bf16 file read.
  const std::int64_t n = std::int64_t{64} << 20;
  // Elements per second of wall time and per CPU-second (this box may be shared and loaded).
  const auto rate = [&](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    f();
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    return std::to_string(static_cast<double>(n) / s.count()) + " elements/s, " +
           std::to_string(static_cast<double>(n) / cpu) + " per CPU-second";
  };
  auto cfg = parse_config({{"model_type", "llama"}, {"vocab_size", 16384}, {"hidden_size", 4096},
                           {"num_hidden_layers", 1}, {"num_attention_heads", 32},
                           {"intermediate_size", 64}},
                          "bench");
  auto meta = meta_model(cfg);
  auto out = torch::zeros({n}, torch::kFloat);  // pages touched before timing
  auto init = seeded_init(cfg, meta->hf_parameters(), 1);
  WARN("seeded_init: " << rate([&] { init->read("model.embed_tokens.weight", 0, out); }));
  CHECK(out.isfinite().all().item<bool>());
  decoder model(cfg, torch::TensorOptions(), false);
  auto embed = model->hf_parameters().front().tensor;
  fill_parameter(*init, "model.embed_tokens.weight", embed);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    temp_dir dir;
    save_hf_model(*model, dir.str(), {5'000'000'000, dtype, ""});
    auto src = open_hf_weights(dir.str(), meta->hf_parameters());
    WARN(c10::toString(dtype) << " file: "
         << rate([&] { src->read("model.embed_tokens.weight", 0, out); }));
    CHECK(out.isfinite().all().item<bool>());
  }
}

TEST_CASE("seeded weights are pinned: the generator cannot change unnoticed", "[core][model]") {
  // A changed generator changes every run's initial weights; these are its values on x86-64.
  const auto cfg = big_llama();
  auto meta = meta_model(cfg);
  auto src = seeded_init(cfg, meta->hf_parameters(), 1234);
  std::vector<std::uint32_t> bits;
  for (const std::int64_t begin : {std::int64_t{0}, seeded_init_chunk + 1}) {
    const auto v = read_slice(*src, "model.embed_tokens.weight", begin, 3);
    for (int i = 0; i < 3; ++i) {
      const float f = v[i].item<float>();
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      bits.push_back(b);
    }
  }
  // Elements 0-2 and 2^20 + 1 to 2^20 + 3 of the embedding (0.05 * normal), as fp32 bit patterns.
  CHECK(bits == std::vector<std::uint32_t>{1030612144u, 3172800872u, 3155805873u, 3156041647u,
                                           3161248357u, 998531154u});
}
