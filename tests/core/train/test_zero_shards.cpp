// The ZeRO optimizer fills a model from a weight source reading only each rank's own shards, so
// no rank ever holds the whole model in fp32 (the model's weights start as placeholders).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/comm/memory_store.hpp"
#include "core/model/decoder.hpp"
#include "core/model/model_config.hpp"
#include "core/model/weight_source.hpp"
#include "core/train/zero_optimizer.hpp"
#include "tests/core/comm/rank_threads.hpp"
#include "tests/core/train/tiny_data.hpp"

#include <catch2/catch.hpp>  // after torch's headers: its CHECK must win

using namespace cohort;

namespace {

// Counts the elements read through it (all ranks' threads together).
class counting_source final : public core::model::weight_source {
 public:
  explicit counting_source(const core::model::weight_source& inner) : inner_(inner) {}
  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    read_ += out.numel();
    inner_.read(name, begin, out);
  }
  std::int64_t elements_read() const { return read_; }

 private:
  const core::model::weight_source& inner_;
  mutable std::atomic<std::int64_t> read_{0};
};

core::model::model_config tiny_config() {
  return core::model::parse_config(nlohmann::json::parse(test::tiny_llama_config()), "test");
}

struct filled {
  std::int64_t parameters = 0;     // of the model
  std::int64_t kept = 0;           // elements of master shards this rank keeps
  std::int64_t held = 0;           // elements of the model's weights after construction
  std::vector<float> weights;      // full_weights()
};

// Builds a placeholder model and a zero_optimizer on each of `world` ranks (threads, Gloo) from
// one source; returns each rank's view and the elements each rank read.
std::vector<filled> fill(int world, int stage, const core::model::weight_source& initial,
                         std::vector<std::int64_t>& read_per_rank) {
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("zero-shards");
  read_per_rank.assign(static_cast<std::size_t>(world), 0);
  auto results = test::run_ranks<filled>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    auto net = core::model::make_placeholder_decoder(tiny_config());
    counting_source mine(initial);
    core::train::zero_options o;
    o.stage = stage;
    core::train::zero_optimizer opt(net->hf_parameters(), mine, *group, o,
                                    [](const std::shared_ptr<core::comm::work>& w) { w->wait(std::chrono::seconds(20)); });
    read_per_rank[static_cast<std::size_t>(rank)] = mine.elements_read();
    filled f;
    f.parameters = opt.parameter_count();
    for (std::size_t u = 0; u < opt.unit_count(); ++u) f.kept += opt.kept_range(u).second;
    for (const auto& p : net->hf_parameters()) f.held += p.tensor.numel();
    auto w = opt.full_weights().contiguous();
    f.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    return f;
  });
  std::vector<filled> out;
  for (auto& r : results) {
    if (r.error) throw std::runtime_error("rank failed: " + r.error_text());
    out.push_back(std::move(*r.value));
  }
  return out;
}

// Every weight of the model, flattened in hf_parameters() order, as the source gives it.
std::vector<float> whole_model(const core::model::weight_source& initial) {
  auto net = core::model::make_placeholder_decoder(tiny_config());
  std::vector<float> all;
  for (const auto& p : net->hf_parameters()) {
    auto t = torch::empty({p.tensor.numel()}, torch::kFloat);
    initial.read(p.name, 0, t);
    all.insert(all.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return all;
}

}  // namespace

TEST_CASE("a placeholder model holds its shapes in no memory", "[core][train]") {
  auto net = core::model::make_placeholder_decoder(tiny_config());
  std::int64_t elements = 0;
  for (const auto& p : net->hf_parameters()) {
    elements += p.tensor.numel();
    CHECK(p.tensor.storage().nbytes() <= sizeof(float));
  }
  CHECK(elements == net->parameter_count());
  CHECK(elements > 10000);
}

TEST_CASE("under ZeRO-3 each rank reads only its own shards and holds no whole weight",
          "[core][train]") {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 5);
  const auto expected = whole_model(*initial);
  for (int world : {2, 3}) {
    INFO("world size " << world);
    std::vector<std::int64_t> reads;
    const auto ranks = fill(world, 3, *initial, reads);
    std::int64_t kept = 0;
    for (int r = 0; r < world; ++r) {
      const auto& f = ranks[static_cast<std::size_t>(r)];
      CHECK(reads[static_cast<std::size_t>(r)] == f.kept);  // its shards, not the model
      CHECK(f.kept < f.parameters / world + 100);            // + the units' padding
      CHECK(f.held == 0);                                    // released until gathered
      CHECK(f.weights == expected);
      kept += f.kept;
    }
    CHECK(kept == ranks[0].parameters);  // the shards cover the model once
  }
}

TEST_CASE("under ZeRO-1 each rank reads its shards and all-gathers whole weights", "[core][train]") {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 5);
  std::vector<std::int64_t> reads;
  const auto ranks = fill(2, 1, *initial, reads);
  for (int r = 0; r < 2; ++r) {
    const auto& f = ranks[static_cast<std::size_t>(r)];
    CHECK(reads[static_cast<std::size_t>(r)] == f.kept);
    CHECK(f.held == f.parameters);
    CHECK(f.weights == whole_model(*initial));
  }
}
