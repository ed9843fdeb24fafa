// Generation with a KV cache: every family's cached forward (growing or preallocated) gives the
// logits of a full forward, greedy decoding matches recomputing the whole sequence each step, a
// batch gives each prompt its own tokens, and sampling is seeded.
#include <algorithm>

#include <torch/utils.h>

#include "core/model/decoder.hpp"
#include "core/model/generate.hpp"
#include "core/model/model_error.hpp"
#include "tests/core/model/model_test_support.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;
using cohort::test::family_configs;

namespace {

std::vector<std::int64_t> random_prompt(std::int64_t vocab, std::int64_t T) {
  auto t = torch::randint(vocab, {T}, torch::kInt64);
  return std::vector<std::int64_t>(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + T);
}

}  // namespace

TEST_CASE(
    "a cached forward, prompt first then a token at a time, gives every position the logits "
    "of one full forward, sliding windows included, with a growing and a preallocated cache",
    "[core][model][generate]") {
  torch::manual_seed(11);
  for (const auto& j : family_configs()) {
    INFO(j.dump());
    decoder model(parse_config(j, "test"));
    model->eval();
    torch::NoGradGuard no_grad;
    const auto ids = torch::randint(j["vocab_size"].get<std::int64_t>(), {2, 12}, torch::kInt64);
    const auto full = model->forward(ids).logits;  // (2, 12, V)
    kv_cache growing;
    auto preallocated = model->preallocated_cache(2, 14, torch::kCPU);
    CHECK(preallocated.keys.at(0).size(2) == 14);
    std::vector<torch::Tensor> grown{model->forward_cached(ids.slice(1, 0, 5), growing)};
    std::vector<torch::Tensor> written{model->forward_at(ids.slice(1, 0, 5), torch::arange(5), preallocated)};
    for (std::int64_t t = 5; t < 12; ++t) {
      grown.push_back(model->forward_cached(ids.slice(1, t, t + 1), growing));
      written.push_back(
          model->forward_at(ids.slice(1, t, t + 1), torch::full({1}, t, torch::kInt64), preallocated));
    }
    CHECK(growing.length == 12);
    for (const auto& pieces : {grown, written}) {
      const auto cached = torch::cat(pieces, 1);
      REQUIRE(cached.sizes() == full.sizes());
      CHECK((cached - full).abs().max().item<double>() < 1e-5);
    }
  }
}

TEST_CASE("greedy generation with the cache produces the tokens of recomputing the whole sequence "
          "every step", "[core][model][generate]") {
  torch::manual_seed(12);
  for (const auto& j : family_configs()) {
    INFO(j.dump());
    decoder model(parse_config(j, "test"));
    const auto prompt = random_prompt(j["vocab_size"].get<std::int64_t>(), 5);
    sampling_settings s;
    s.max_new_tokens = 9;  // 14 positions: within the 16 of the learned-position families
    const auto cached = generate(*model, prompt, s);
    CHECK(cached.size() == 9);
    CHECK(cached == generate_uncached_greedy(*model, prompt, 9));
    CHECK(model->is_training());  // the mode it had is restored
  }
}

TEST_CASE("generation stops after a stop token and returns it", "[core][model][generate]") {
  torch::manual_seed(13);
  decoder model(parse_config(family_configs()[1], "test"));
  const auto prompt = random_prompt(40, 4);
  sampling_settings s;
  s.max_new_tokens = 8;
  const auto all = generate(*model, prompt, s);
  s.stop_ids = {all[2]};
  const auto first_stop = std::find(all.begin(), all.end(), all[2]) - all.begin();
  const auto stopped = generate(*model, prompt, s);
  CHECK(stopped == std::vector<std::int64_t>(all.begin(), all.begin() + first_stop + 1));
}

TEST_CASE("sampling is seeded, and top-k 1 or a tiny top-p leaves only the greedy token",
          "[core][model][generate]") {
  torch::manual_seed(14);
  decoder model(parse_config(family_configs()[1], "test"));
  const auto prompt = random_prompt(40, 4);
  sampling_settings greedy;
  greedy.max_new_tokens = 10;
  const auto expected = generate(*model, prompt, greedy);
  sampling_settings s = greedy;
  s.greedy = false;
  s.temperature = 1.5;
  s.seed = 5;
  const auto a = generate(*model, prompt, s);
  CHECK(a == generate(*model, prompt, s));
  s.seed = 6;
  CHECK(a != generate(*model, prompt, s));  // 10 draws from near-uniform logits over 40 tokens
  s.top_k = 1;
  CHECK(generate(*model, prompt, s) == expected);
  s.top_k = 0;
  s.top_p = 1e-9;
  CHECK(generate(*model, prompt, s) == expected);
}

TEST_CASE("bad sampling settings and prompts are refused, naming what is allowed",
          "[core][model][generate]") {
  decoder model(parse_config(family_configs()[0], "test"));  // gpt2, 16 learned positions
  sampling_settings s;
  s.temperature = 0;
  CHECK_THROWS_WITH(generate(*model, {1, 2}, s), Catch::Contains("temperature") && Catch::Contains("more than 0"));
  s = {};
  s.top_p = 1.5;
  CHECK_THROWS_WITH(generate(*model, {1, 2}, s), Catch::Contains("top_p") && Catch::Contains("at most 1"));
  s = {};
  CHECK_THROWS_WITH(generate(*model, {1, 40}, s), Catch::Contains("prompt token 1 is 40") && Catch::Contains("0 to 39"));
  CHECK_THROWS_WITH(generate(*model, {}, s), Catch::Contains("no tokens"));
  s.max_new_tokens = 8;
  CHECK_THROWS_AS(generate(*model, std::vector<std::int64_t>(12, 3), s), model_error);  // 12 + 8 > 16
}

TEST_CASE(
    "greedy generation gives the same tokens with a preallocated cache as with a growing one, "
    "and a batch of prompts gives each the tokens it gets alone",
    "[core][model][generate]") {
  torch::manual_seed(16);
  for (const auto& j : family_configs()) {
    INFO(j.dump());
    decoder model(parse_config(j, "test"));
    const std::int64_t V = j["vocab_size"].get<std::int64_t>();
    const std::vector<std::vector<std::int64_t>> prompts{random_prompt(V, 5), random_prompt(V, 3),
                                                         random_prompt(V, 5), random_prompt(V, 5)};
    sampling_settings s;
    s.max_new_tokens = 9;
    std::vector<std::vector<std::int64_t>> alone;
    for (const auto& p : prompts) alone.push_back(generate(*model, p, s));
    std::vector<generation_stats> batches;
    const auto keep = [&](const generation_stats& st) { batches.push_back(st); };
    CHECK(generate_all(*model, prompts, s, 2, keep) == alone);
    REQUIRE(batches.size() == 3);  // the 5-token prompts 0 and 2, then 3, then the 3-token prompt 1
    CHECK(batches[0].rows == 2);
    CHECK(batches[0].prompt_tokens == 5);
    CHECK(batches[0].new_tokens == 18);
    CHECK(batches[1].rows == 1);
    CHECK(batches[1].prompt_tokens == 5);
    CHECK(batches[2].prompt_tokens == 3);
    CHECK_FALSE(batches[0].cuda_graph);
    s.cache = cache_layout::preallocated;
    CHECK(generate_all(*model, prompts, s, 3) == alone);
    CHECK(generate_all(*model, prompts, s, 1) == alone);
  }
}

TEST_CASE("in a batch each row ends at its own stop token while the others go on",
          "[core][model][generate]") {
  torch::manual_seed(17);
  decoder model(parse_config(family_configs()[1], "test"));
  const std::vector<std::vector<std::int64_t>> prompts{random_prompt(40, 4), random_prompt(40, 4)};
  sampling_settings s;
  s.max_new_tokens = 8;
  const auto free_run = generate_all(*model, prompts, s, 2);
  s.stop_ids = {free_run[0][1]};
  for (auto layout : {cache_layout::growing, cache_layout::preallocated}) {
    s.cache = layout;
    std::int64_t counted = 0;
    const auto stopped =
        generate_all(*model, prompts, s, 2, [&](const generation_stats& st) { counted = st.new_tokens; });
    std::int64_t expected = 0;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto& row = free_run[r];
      const auto end = std::find(row.begin(), row.end(), s.stop_ids[0]);
      const auto want = std::vector<std::int64_t>(row.begin(), end == row.end() ? end : end + 1);
      CHECK(stopped[r] == want);
      expected += static_cast<std::int64_t>(want.size());
    }
    CHECK(counted == expected);
    CHECK(stopped[0].size() <= 2);
  }
}

TEST_CASE("a preallocated cache longer than learned positions allow is refused before any step",
          "[core][model][generate]") {
  decoder model(parse_config(family_configs()[0], "test"));  // gpt2, 16 learned positions
  CHECK_THROWS_WITH(model->preallocated_cache(1, 17, torch::kCPU),
                    Catch::Contains("17 positions") && Catch::Contains("1 to 16"));
  sampling_settings s;
  s.max_new_tokens = 8;
  s.cache = cache_layout::preallocated;
  CHECK_THROWS_WITH(generate(*model, std::vector<std::int64_t>(12, 3), s), Catch::Contains("19 positions"));
  CHECK_THROWS_WITH(generate_all(*model, {{1, 2}}, s, 0), Catch::Contains("batch is 0"));
}
