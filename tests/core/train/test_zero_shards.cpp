// The ZeRO optimizer fills a model from a weight source reading only each rank's own shards, so
// no rank ever holds the whole model in fp32 (the model's weights start as placeholders); with
// parameter offload its host update may run beside the next step's gathers, with the same results.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <set>
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

#include "tests/support/catch_torch.hpp"

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
  std::int64_t held = 0;           // bytes the model's weights hold after construction
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
    std::set<const void*> storages;  // stage 3: a unit's weights share one buffer
    for (const auto& p : net->hf_parameters())
      if (storages.insert(p.tensor.storage().unsafeGetStorageImpl()).second)
        f.held += static_cast<std::int64_t>(p.tensor.storage().nbytes());
    auto w = opt.full_weights().contiguous();
    f.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    return f;
  });
  return test::values_of(results);
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
    CHECK(f.held == 4 * f.parameters);
    CHECK(f.weights == whole_model(*initial));
  }
}

namespace {

// What one rank saw while gathering and releasing layer 0's unit around an autograd forward.
struct release_trace {
  std::int64_t unit_bytes = 0;             // 4 × world × padded shard
  std::int64_t bytes_before = -1;          // gathered_bytes() after construction
  std::int64_t weight_bytes_before = -1;   // q_proj.weight's storage then
  std::int64_t bytes_gathered = -1;        // gathered_bytes() after gather()
  bool values_gathered = false;            // q_proj.weight equals the source's
  std::int64_t bytes_released = -1;        // gathered_bytes() after release()
  std::int64_t peak = -1;                  // gathered_peak_bytes() then
  std::int64_t weight_bytes_released = -1; // q_proj.weight's storage then
  std::int64_t saved_bytes_released = -1;  // a view of it, as autograd saves one
  bool shape_kept = false;
  bool values_refilled = false;            // the view after gather() again
  bool backward_right = false;             // x.grad from the refilled weight
  bool weight_grad = false;
  std::int64_t bytes_after_release_all = -1;
};

}  // namespace

TEST_CASE("a released ZeRO-3 unit holds no bytes while autograd keeps its weights, and a gather "
          "refills them for the backward", "[core][train]") {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 5);
  const int world = 2;
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("zero-release");
  auto results = test::run_ranks<release_trace>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    auto net = core::model::make_placeholder_decoder(tiny_config());
    core::train::zero_options o;
    o.stage = 3;
    core::train::zero_optimizer opt(net->hf_parameters(), *initial, *group, o,
                                    [](const std::shared_ptr<core::comm::work>& w) { w->wait(std::chrono::seconds(20)); });
    release_trace t;
    const auto unit = core::train::zero_optimizer::layer_unit(0);
    std::int64_t elements = 0;
    for (const auto& p : opt.parameters_of(unit)) elements += p.numel;
    t.unit_bytes = 4 * world * ((elements + world - 1) / world);
    torch::Tensor w = net->layers()[0]->attn->q->weight;  // (out, in), a view of the unit's buffer
    t.bytes_before = opt.gathered_bytes();
    t.weight_bytes_before = static_cast<std::int64_t>(w.storage().nbytes());

    opt.gather(unit);
    t.bytes_gathered = opt.gathered_bytes();
    auto expected = torch::empty({w.numel()}, torch::kFloat);
    initial->read("model.layers.0.self_attn.q_proj.weight", 0, expected);
    expected = expected.view(w.sizes());
    t.values_gathered = torch::equal(w, expected);
    // A forward that autograd records keeps a view of the weight for its backward (mm: w.t()).
    auto x = torch::randn({3, w.size(1)}).requires_grad_(true);
    auto y = torch::matmul(x, w.t()).sum();
    auto saved_like = w.t();
    opt.release(unit);
    t.bytes_released = opt.gathered_bytes();
    t.peak = opt.gathered_peak_bytes();
    t.weight_bytes_released = static_cast<std::int64_t>(w.storage().nbytes());
    t.saved_bytes_released = static_cast<std::int64_t>(saved_like.storage().nbytes());
    t.shape_kept = w.sizes() == expected.sizes();
    opt.gather(unit);
    t.values_refilled = torch::equal(saved_like, expected.t());
    y.backward();  // dy/dx = ones(3, out) @ w, with the refilled weight
    t.backward_right = torch::allclose(x.grad(), torch::ones({3, w.size(0)}).matmul(expected));
    t.weight_grad = w.grad().defined();
    opt.release_all();
    t.bytes_after_release_all = opt.gathered_bytes();
    return t;
  });
  for (auto& r : results) {
    if (r.error) FAIL("rank failed: " << r.error_text());
    const auto& t = *r.value;
    CHECK(t.bytes_before == 0);
    CHECK(t.weight_bytes_before == 0);
    CHECK(t.bytes_gathered == t.unit_bytes);
    CHECK(t.values_gathered);
    CHECK(t.bytes_released == 0);
    CHECK(t.peak == t.unit_bytes);
    CHECK(t.weight_bytes_released == 0);  // the weight holds nothing ...
    CHECK(t.saved_bytes_released == 0);   // ... nor does what autograd keeps of it
    CHECK(t.shape_kept);                  // but it keeps its shape
    CHECK(t.values_refilled);
    CHECK(t.backward_right);
    CHECK(t.weight_grad);
    CHECK(t.bytes_after_release_all == 0);
  }
}

namespace {

// How a run of run_offloaded updates.
enum class host_update { sequential, overlapped, delayed };

struct offload_run {
  std::vector<float> weights;
  std::vector<double> norms;
  std::vector<double> seen;  // per step: the sum of the weights its gathers read, over all units
  bool overlapped = false;
  std::int64_t kept_bytes = 0;            // kept_shard_bytes() after the last step
  std::vector<std::int64_t> shard_bytes;  // each unit's compute-dtype shard on this rank
};

struct offload_setup {
  host_update mode = host_update::sequential;
  bool fixed_grads = false;    // gradients from the step alone, not from the weights
  int settle_after = -1;       // >= 0: the masters are read after that step (as a checkpoint does)
  int delay_after = 0;         // a delayed update starts after this many on time
  int micro_batches = 1;       // gradients reduced this many times a step, the last one said so
  bool sum_on_device = false;  // zero_options::sum_grads_on_device
  std::int64_t kept_units = 0;  // zero_options::param_shard_units_kept_on_device
};

// ZeRO-3 with both offloads over `net`'s weights from `initial` (o's other settings as given).
std::unique_ptr<core::train::zero_optimizer> offloaded_optimizer(core::model::decoder& net,
                                                                 const core::model::weight_source& initial,
                                                                 core::comm::process_group& group,
                                                                 core::train::zero_options o) {
  o.stage = 3;
  o.offload = o.offload_param = true;
  return std::make_unique<core::train::zero_optimizer>(
      net->hf_parameters(), initial, group, o,
      [](const std::shared_ptr<core::comm::work>& w) { w->wait(std::chrono::seconds(20)); });
}

// Each unit's parameter tensors, in the model's order.
std::vector<std::vector<torch::Tensor>> unit_params_of(core::model::decoder& net, std::size_t units) {
  std::vector<std::vector<torch::Tensor>> out(units);
  for (const auto& p : net->hf_parameters())
    out[core::train::zero_optimizer::layer_unit(p.layer)].push_back(p.tensor);
  return out;
}

// Four steps of ZeRO-3 with both offloads on `world` ranks: every unit gathered in order, a
// gradient made from its weights (so that a weight read before its update finished would change
// what follows) or from the step alone; reduced; the global norm clipped to 1. Returns each
// rank's full_weights(), the norms, the weights each step saw, and whether an update ran on a
// thread of its own.
std::vector<offload_run> run_offloaded(int world, const offload_setup& setup) {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 11);
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("zero-overlap");
  auto results = test::run_ranks<offload_run>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    auto net = core::model::make_placeholder_decoder(tiny_config());
    core::train::zero_options o;
    o.overlap_host_update = setup.mode != host_update::sequential;
    o.delayed_update = setup.mode == host_update::delayed;
    o.delay_after = setup.delay_after;
    o.sum_grads_on_device = setup.sum_on_device;
    o.param_shard_units_kept_on_device = setup.kept_units;
    const auto optimizer = offloaded_optimizer(net, *initial, *group, o);
    auto& opt = *optimizer;
    auto unit_params = unit_params_of(net, opt.unit_count());
    core::model::adamw_options ao;
    ao.lr = 0.05;
    ao.weight_decay = 0.1;
    offload_run run;
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad_shards();
      double seen = 0;
      for (int micro = 0; micro < setup.micro_batches; ++micro) {
        for (std::size_t u = 0; u < opt.unit_count(); ++u) {
          opt.gather(u);
          for (auto& w : unit_params[u]) {
            if (micro == 0) seen += w.detach().to(torch::kDouble).sum().item<double>();
            const auto base = setup.fixed_grads ? torch::ones_like(w) * 0.3 : w.detach();
            w.mutable_grad() = torch::sin(base * (step + 1) + rank + micro * 0.7);
          }
          opt.reduce_grads(u, micro + 1 == setup.micro_batches);
          opt.release(u);
        }
      }
      run.seen.push_back(seen);
      opt.synchronize();
      const double norm = std::sqrt(opt.grad_square_sum().item<double>());
      run.norms.push_back(norm);
      opt.step(ao, std::min(1.0, 1.0 / (norm + 1e-6)));
      if (step == setup.settle_after) (void)opt.master(0);
    }
    run.overlapped = opt.overlapped_update_seconds() > 0;
    run.kept_bytes = opt.kept_shard_bytes();
    for (const auto& params : unit_params) {
      std::int64_t numel = 0;
      for (const auto& w : params) numel += w.numel();
      run.shard_bytes.push_back((numel + world - 1) / world * static_cast<std::int64_t>(sizeof(float)));
    }
    auto w = opt.full_weights().contiguous();
    run.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    return run;
  });
  return test::values_of(results);
}

// Each rank's gradient norms and final weights the same, bit for bit.
void check_same_training(const std::vector<offload_run>& got, const std::vector<offload_run>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t rank = 0; rank < got.size(); ++rank) {
    INFO("rank " << rank);
    CHECK(got[rank].norms == want[rank].norms);
    CHECK(got[rank].weights == want[rank].weights);
  }
}

}  // namespace

TEST_CASE(
    "with parameter offload the host update overlapped with the next step's gathers gives "
    "bitwise the weights of the update run in step()",
    "[core][train]") {
  for (int world : {1, 2}) {
    INFO("world size " << world);
    const auto sequential = run_offloaded(world, {host_update::sequential});
    const auto overlapped = run_offloaded(world, {host_update::overlapped});
    check_same_training(overlapped, sequential);
    for (int rank = 0; rank < world; ++rank) {
      CHECK_FALSE(sequential[rank].overlapped);
      CHECK(overlapped[rank].overlapped);
      CHECK(overlapped[rank].seen == sequential[rank].seen);
    }
    CHECK(sequential[0].seen[3] != sequential[0].seen[0]);  // the steps did change the weights
  }
}

TEST_CASE(
    "the delayed parameter update lets each step compute on the weights from one update before, "
    "after the updates it makes on time, and a checkpoint's read of the masters ends the delay",
    "[core][train]") {
  // The same gradients whatever the weights: the updates are the same, only what each step sees
  // moves by one.
  const int world = 2;
  const auto sequential = run_offloaded(world, {host_update::sequential, true});
  const auto delayed = run_offloaded(world, {host_update::delayed, true});
  const auto settled = run_offloaded(world, {host_update::delayed, true, 1});   // read after step 2
  const auto late = run_offloaded(world, {host_update::delayed, true, -1, 2});  // 2 updates on time
  for (int rank = 0; rank < world; ++rank) {
    INFO("rank " << rank);
    const auto& s = sequential[rank].seen;
    CHECK(delayed[rank].overlapped);
    CHECK(delayed[rank].seen == std::vector<double>{s[0], s[0], s[1], s[2]});
    CHECK(settled[rank].seen == std::vector<double>{s[0], s[0], s[2], s[2]});
    CHECK(late[rank].seen == std::vector<double>{s[0], s[1], s[2], s[2]});
  }
  // full_weights() waits for the last update.
  for (const auto* run : {&delayed, &settled, &late}) check_same_training(*run, sequential);
  CHECK(sequential[0].seen[1] != sequential[0].seen[0]);  // the steps did change the weights
}

TEST_CASE(
    "with parameter offload the micro-batches' gradient shards summed on the device give bitwise "
    "the weights of the sums made on the host",
    "[core][train]") {
  for (int world : {1, 2}) {
    INFO("world size " << world);
    offload_setup setup;
    setup.micro_batches = 3;
    const auto on_host = run_offloaded(world, setup);
    setup.sum_on_device = true;
    check_same_training(run_offloaded(world, setup), on_host);
    setup.mode = host_update::overlapped;
    check_same_training(run_offloaded(world, setup), on_host);
    CHECK(on_host[0].norms != run_offloaded(world, {})[0].norms);  // three micro-batches are not one
  }
}

TEST_CASE(
    "with parameter offload the shards kept on the device between updates, of the first units or "
    "of all, give every gather the weights a copy from the host gives: after each update on time, "
    "overlapped or delayed, and after a checkpoint's read",
    "[core][train]") {
  for (int world : {1, 2}) {
    INFO("world size " << world);
    for (auto mode : {host_update::sequential, host_update::overlapped, host_update::delayed}) {
      INFO("mode " << static_cast<int>(mode));
      offload_setup setup;
      setup.mode = mode;
      setup.micro_batches = 2;  // each unit gathered twice a step: the second from the kept copy
      setup.settle_after = 1;   // a checkpoint's read of the masters ends a delay
      setup.delay_after = 1;
      const auto from_host = run_offloaded(world, setup);
      REQUIRE(from_host[0].shard_bytes.size() == 3);  // unit 0 and two layers
      CHECK(from_host[0].kept_bytes == 0);
      // The layers first, unit 0 last: the first layer kept, the second layer and unit 0 copied
      // from the host; both layers kept; every unit; a count past the last unit: every unit too.
      for (std::int64_t units : {1, 2, 3, 5}) {
        INFO(units << " units kept");
        setup.kept_units = units;
        const auto kept = run_offloaded(world, setup);
        check_same_training(kept, from_host);
        for (int rank = 0; rank < world; ++rank) {
          CHECK(kept[rank].seen == from_host[rank].seen);
          const auto& shard = kept[rank].shard_bytes;
          const std::int64_t layers = shard[1] + (units >= 2 ? shard[2] : 0);
          CHECK(kept[rank].kept_bytes == (units >= 3 ? shard[0] + layers : layers));
        }
      }
      CHECK(from_host[0].seen[3] != from_host[0].seen[0]);  // the steps did change the weights
    }
  }
}

TEST_CASE(
    "a negative number of units whose parameter shards stay on the device is refused, naming the option",
    "[core][train]") {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 11);
  auto store = std::make_shared<core::comm::memory_store>();
  auto group =
      core::comm::make_process_group(test::gloo_options(store, 0, 1, test::unique_prefix("zero-kept-units")));
  auto net = core::model::make_placeholder_decoder(tiny_config());
  core::train::zero_options o;
  o.param_shard_units_kept_on_device = -1;
  CHECK_THROWS_WITH(offloaded_optimizer(net, *initial, *group, o),
                    Catch::Contains("param_shard_units_kept_on_device") && Catch::Contains("-1"));
  o.param_shard_units_kept_on_device = 1;
  CHECK(offloaded_optimizer(net, *initial, *group, o)->kept_shard_bytes() == 0);  // until a gather
}

TEST_CASE(
    "with parameter offload the gradient's square sum is that of the whole gradient, whether taken "
    "from the shards as they were reduced or from the micro-batches' sum on the host",
    "[core][train]") {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 11);
  for (int micro_batches : {1, 3}) {
    for (bool sum_on_device : {false, true}) {
      INFO(micro_batches << " micro-batches, summed on the device " << sum_on_device);
      auto store = std::make_shared<core::comm::memory_store>();
      auto group = core::comm::make_process_group(
          test::gloo_options(store, 0, 1, test::unique_prefix("zero-squares")));
      auto net = core::model::make_placeholder_decoder(tiny_config());
      core::train::zero_options o;
      o.sum_grads_on_device = sum_on_device;
      const auto optimizer = offloaded_optimizer(net, *initial, *group, o);
      auto& opt = *optimizer;
      auto unit_params = unit_params_of(net, opt.unit_count());
      double expected = 0;  // the square sum of each weight's gradient summed over the micro-batches
      std::vector<torch::Tensor> sums;
      opt.zero_grad_shards();
      for (int micro = 0; micro < micro_batches; ++micro) {
        std::size_t i = 0;
        for (std::size_t u = 0; u < opt.unit_count(); ++u) {
          opt.gather(u);
          for (auto& w : unit_params[u]) {
            w.mutable_grad() =
                torch::sin(torch::arange(w.numel(), torch::kFloat).view(w.sizes()) * (micro + 1));
            if (micro == 0)
              sums.push_back(w.grad().to(torch::kDouble).clone());
            else
              sums[i] += w.grad().to(torch::kDouble);
            ++i;
          }
          opt.reduce_grads(u, micro + 1 == micro_batches);
          opt.release(u);
        }
      }
      for (const auto& s : sums) expected += s.pow(2).sum().item<double>();
      opt.synchronize();
      const double got = opt.grad_square_sum().item<double>();
      CHECK(got == Approx(expected).epsilon(1e-6));
      CHECK(got > 0);
    }
  }
}

namespace {

struct sunk_run {
  std::vector<float> weights;       // full_weights() after the steps
  std::vector<double> norms;        // each step's gradient norm
  std::set<std::string> with_grad;  // the parameters whose .grad a backward left defined
};

// Two steps of ZeRO-3 on `world` ranks over the tiny Llama on the fused path (fp32, CPU): every
// unit gathered, the model's loss of a batch of each rank's own, backward, each unit reduced,
// AdamW.
std::vector<sunk_run> run_fused_stage3(int world, bool grads_in_buffer) {
  const auto initial = core::model::seeded_init(
      tiny_config(), core::model::make_placeholder_decoder(tiny_config())->hf_parameters(), 5);
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("zero-sunk");
  auto results = test::run_ranks<sunk_run>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    auto net = core::model::make_placeholder_decoder(tiny_config());
    net->set_compute_path(core::model::compute_path::fused);
    core::train::zero_options o;
    o.stage = 3;
    o.weight_grads_in_buffer = grads_in_buffer;
    core::train::zero_optimizer opt(
        net->hf_parameters(), *initial, *group, o,
        [](const std::shared_ptr<core::comm::work>& w) { w->wait(std::chrono::seconds(20)); });
    core::model::adamw_options ao;
    ao.lr = 0.01;
    sunk_run run;
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad_shards();
      for (std::size_t u = 0; u < opt.unit_count(); ++u) opt.gather(u);
      const auto ids = (torch::arange(32, torch::kLong).view({2, 16}) * (7 + rank + 3 * step)) % 300;
      net->forward(ids, ids).loss.backward();
      for (const auto& p : net->hf_parameters())
        if (p.tensor.grad().defined()) run.with_grad.insert(p.name);
      for (std::size_t u = 0; u < opt.unit_count(); ++u) opt.reduce_grads(u);
      opt.synchronize();
      const double norm = std::sqrt(opt.grad_square_sum().item<double>());
      run.norms.push_back(norm);
      opt.step(ao, 1.0);
    }
    const auto full = opt.full_weights();
    run.weights.assign(full.data_ptr<float>(), full.data_ptr<float>() + full.numel());
    return run;
  });
  return test::values_of(results);
}

}  // namespace

TEST_CASE(
    "at stage 3 the fused path's GEMMs write their weights' gradients into the optimizer's fp32 "
    "buffer: their .grad stays empty, and the gradients and updates are those through autograd",
    "[core][train]") {
  const auto through_autograd = run_fused_stage3(2, false);
  const auto in_buffer = run_fused_stage3(2, true);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto& a = through_autograd[rank];
    const auto& b = in_buffer[rank];
    // Through autograd every weight of the layers gets a .grad; in the buffer only the norms'
    // (outside the GEMMs) and those outside the layers (embeddings, final norm, head).
    for (const auto* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                             "model.layers.1.self_attn.o_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
      CHECK(a.with_grad.count(name) == 1);
      CHECK(b.with_grad.count(name) == 0);
    }
    for (const auto* name :
         {"model.layers.0.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
          "lm_head.weight", "model.embed_tokens.weight"}) {
      CHECK(a.with_grad.count(name) == 1);
      CHECK(b.with_grad.count(name) == 1);
    }
    REQUIRE(b.norms.size() == a.norms.size());
    for (std::size_t s = 0; s < a.norms.size(); ++s) CHECK(b.norms[s] == a.norms[s]);
    CHECK(b.weights == a.weights);
  }
}
