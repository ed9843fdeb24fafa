// The ZeRO optimizer takes a T5's weights as it takes a decoder's (hf_parameters(): names, shapes,
// layers as units): stages 0-3 on two ranks (threads over Gloo), each rank one row of fixed
// batches, train a tiny T5 to the weights one process computes with torch.optim.AdamW's update.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/comm/memory_store.hpp"
#include "core/model/adamw.hpp"
#include "core/model/t5.hpp"
#include "core/model/weight_source.hpp"
#include "core/train/zero_optimizer.hpp"
#include "tests/core/comm/rank_threads.hpp"
#include "tests/support/files.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort;
namespace model = cohort::core::model;

namespace {

const std::string fixture = std::string(COHORT_MODEL_FIXTURES) + "/t5-v1_0";
constexpr int train_steps = 3;
const model::adamw_options adam{1e-3, 0.9, 0.95, 1e-8, 0.1};
constexpr double clip = 0.5;

// The fixture's two rows (input ids, attention mask, labels with -100) and, per step, the same
// rows with the labels rotated by the step so that each step's gradient differs.
struct rows {
  torch::Tensor ids, mask, labels;
};

rows batch(int step) {
  const auto ref = nlohmann::json::parse(test::read_file(fixture + "/reference.json"));
  const auto tensor = [](const nlohmann::json& j) {
    std::vector<std::int64_t> flat;
    for (const auto& row : j)
      for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
    return torch::tensor(flat, torch::kInt64).view({static_cast<std::int64_t>(j.size()), -1});
  };
  auto labels = tensor(ref["labels"]);
  const auto real = labels.ne(-100);
  labels = torch::where(real, (labels + 7 * step) % 128, labels);
  return {tensor(ref["input_ids"]), tensor(ref["attention_mask"]), labels};
}

// The summed cross-entropy of rows [first, first + count) over `labels_total`, the gradient that
// of the batch's mean.
torch::Tensor scaled_loss(model::t5_model_impl& net, const rows& b, std::int64_t first, std::int64_t count,
                          double labels_total) {
  const auto ids = b.ids.narrow(0, first, count), mask = b.mask.narrow(0, first, count);
  const auto labels = b.labels.narrow(0, first, count);
  const auto logits = net.forward(ids, mask, labels).logits;
  const auto sum = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), {},
                                          at::Reduction::Sum, -100);
  return sum / labels_total;
}

std::vector<float> flat_weights(const std::vector<torch::Tensor>& params) {
  std::vector<float> out;
  for (const auto& p : params) {
    const auto flat = p.detach().contiguous().view(-1);
    out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

// One process, the whole batch: torch.optim.AdamW after clip_grad_norm_, `steps` times (0: the
// fixture's weights).
std::vector<float> reference_weights(int steps) {
  auto net = model::load_t5_model(fixture, {torch::kFloat});
  std::vector<torch::Tensor> params;
  for (const auto& p : net->hf_parameters()) params.push_back(p.tensor.set_requires_grad(true));
  std::vector<model::adamw_state> states(params.size());
  for (int s = 0; s < steps; ++s) {
    const auto b = batch(s);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    scaled_loss(*net, b, 0, 2, b.labels.ne(-100).sum().item<double>()).backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    model::clip_grad_norm(grads, clip);
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) model::adamw_step(params[i], grads[i], states[i], adam);
  }
  return flat_weights(params);
}

struct rank_outcome {
  std::vector<float> weights;  // full_weights() after the steps
  std::size_t units = 0;
};

// train_steps steps of ZeRO `stage` on two ranks, rank r training on row r, as the causal LM
// engine steps: every unit gathered, forward and backward, gradients reduced into the shards, the
// norm summed over ranks (stage 0: whole on each), clipped AdamW on the shards.
std::vector<test::rank_result<rank_outcome>> train(int stage) {
  const int world = 2;
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("t5-zero");
  return test::run_ranks<rank_outcome>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    model::t5_model net(model::read_t5_config(fixture));  // weights filled by the optimizer
    const auto source = model::open_hf_weights(fixture, net->hf_parameters());
    core::train::zero_options o;
    o.stage = stage;
    core::train::zero_optimizer opt(net->hf_parameters(), *source, *group, o,
                                    [](const std::shared_ptr<core::comm::work>& w) { w->wait(std::chrono::seconds(20)); });
    for (int s = 0; s < train_steps; ++s) {
      const auto b = batch(s);
      opt.zero_grad_shards();
      for (std::size_t u = 0; u < opt.unit_count(); ++u) opt.gather(u);
      scaled_loss(*net, b, rank, 1, b.labels.ne(-100).sum().item<double>()).backward();
      for (std::size_t u = 0; u < opt.unit_count(); ++u) opt.reduce_grads(u);
      opt.synchronize();
      auto squares = opt.grad_square_sum().cpu().reshape({1});
      if (stage > 0) group->all_reduce(squares, core::comm::reduce_op::sum)->wait(std::chrono::seconds(20));
      opt.step(adam, model::clip_coefficient(std::sqrt(squares.item<double>()), clip));
    }
    rank_outcome r;
    r.units = opt.unit_count();
    const auto w = opt.full_weights().contiguous();
    r.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    return r;
  });
}

double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("ZeRO stages 0-3 train a T5 on two ranks to the weights of one process", "[core][train][t5]") {
  const auto want = reference_weights(train_steps);
  CHECK(max_gap(want, reference_weights(0)) > 1e-3);  // the steps moved the weights
  const auto cfg = model::read_t5_config(fixture);
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    const auto ranks = train(stage);
    for (const auto& r : ranks) {
      if (r.error) FAIL("rank failed: " << r.error_text());
    }
    // Unit 0 (embedding, final norms, relative-position tables) and one unit per block.
    CHECK(ranks[0].value->units == static_cast<std::size_t>(1 + cfg.num_layers + cfg.num_decoder_layers));
    CHECK(ranks[0].value->weights == ranks[1].value->weights);
    const double gap = max_gap(ranks[0].value->weights, want);
    CAPTURE(gap);
    CHECK(gap <= 1e-5);
  }
}
