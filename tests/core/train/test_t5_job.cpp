// A T5 job end to end as workers run it: a tiny T5 (tests/core/model/fixtures/t5-v1_0) fine-tuned
// on a seq2seq data set built here from a small jsonl, on two ranks (threads over Gloo). ZeRO 0
// and 3 agree, a stopped run resumes to the uninterrupted run's weights bitwise, the export loads
// (cohort's loader and `cohort-model eval`) with a lower loss than the fixture, and specs T5
// cannot run are refused naming the field.
#include <torch/torch.h>

#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/rank_checks.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <cmath>
#include <fstream>
#include <functional>
#include <utility>

#include "core/ckpt/layout.hpp"
#include "core/data/batch_loader.hpp"
#include "core/data/build/builder.hpp"
#include "core/model/t5.hpp"
#include "core/train/job_preflight.hpp"
#include "core/train/memory_estimate.hpp"
#include "core/train/seq2seq_engine.hpp"
#include "tests/support/tool_run.hpp"

using namespace cohort;
using cohort::test::temp_dir;

using cohort::test::require_ok;

namespace {

const std::string fixture = std::string(COHORT_MODEL_FIXTURES) + "/t5-v1_0";
constexpr std::int64_t total_steps = 6;

// One id per character within the fixture's 128 ids: 3 + (byte % 120); PAD 0, EOS 1.
class small_tokenizer : public core::tokenizer::tokenizer {
 public:
  std::vector<core::tokenizer::token_id> encode(const std::string& text) const override {
    std::vector<core::tokenizer::token_id> out;
    for (unsigned char c : text) out.push_back(3 + c % 120);
    return out;
  }
  std::string decode(const std::vector<core::tokenizer::token_id>& ids) const override {
    std::string out;
    for (auto id : ids)
      if (id >= 3) out += static_cast<char>(id - 3);
    return out;
  }
  std::int64_t vocab_size() const override { return 128; }
  std::optional<core::tokenizer::token_id> bos_id() const override { return std::nullopt; }
  std::optional<core::tokenizer::token_id> eos_id() const override { return 1; }
  std::optional<core::tokenizer::token_id> pad_id() const override { return 0; }
  std::vector<core::tokenizer::token_id> add_special_tokens(const std::vector<std::string>&) override {
    throw std::logic_error("small_tokenizer has no added tokens");
  }
  std::optional<core::tokenizer::token_id> token_to_id(const std::string&) const override { return std::nullopt; }
  std::string identity() const override { return "test-small"; }
};

// `count` additions as question/sql lines, built into a seq2seq data set at `dir`.
std::string make_seq2seq_data(const temp_dir& tmp, const std::string& name, int count = 32) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    const int a = i % 7, b = (3 * i) % 5;
    text += nlohmann::json{{"question", "add " + std::to_string(a) + " " + std::to_string(b)},
                           {"sql", std::to_string(a + b)}}
                .dump() +
            "\n";
  }
  core::data::build_options o;
  o.input = tmp.write(name + ".jsonl", text);
  o.out_dir = tmp.path(name);
  o.tokenizer_path = "test";
  o.template_source = "{question}";
  o.template_target = "{sql}";
  o.seq_len = 12;
  o.target_len = 4;
  o.progress = false;
  o.threads = 1;
  small_tokenizer tok;
  core::data::build_dataset(o, tok);
  return o.out_dir;
}

config::job_spec t5_job(const std::string& data, int stage) {
  config::job_spec s;
  s.name = "t5";
  s.workload = config::workload_kind::causal_lm;
  s.model.hf_dir = fixture;
  s.data.train = data;
  s.scaling.num_workers = 2;
  s.train.seq_len = 12;
  s.train.micro_batch_size = 2;
  s.train.grad_accum = 2;
  s.train.max_steps = total_steps;
  s.train.lr = 3e-3;
  s.train.warmup_steps = 1;
  s.train.schedule = config::lr_schedule::cosine;
  s.train.grad_clip = 1.0;
  s.train.seed = 5;
  s.zero.stage = stage;
  s.run.checkpoint.every_steps = 2;
  return s;
}

// Runs `spec` into `run_dir` and cancels it at step 3, after the checkpoint of step 2: every rank
// ends with an error.
void stop_at_step_3(const config::job_spec& spec, const std::string& run_dir) {
  for (const auto& r : test::run_until_step(spec, run_dir, 3)) REQUIRE(r.error);
}

std::map<std::string, std::string> final_tensors(const std::string& run_dir) {
  return test::checkpoint_tensors(core::ckpt::step_dir(run_dir, total_steps));
}

double max_gap(const std::string& a, const std::string& b) {
  REQUIRE(a.size() == b.size());
  const auto* x = reinterpret_cast<const float*>(a.data());
  const auto* y = reinterpret_cast<const float*>(b.data());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() / sizeof(float); ++i) worst = std::max(worst, std::abs(double{x[i]} - y[i]));
  return worst;
}

// Every tensor of the two runs' final checkpoints, element for element within tol.
void check_final_tensors_close(const std::string& run_a, const std::string& run_b, double tol) {
  const auto a = final_tensors(run_a), b = final_tensors(run_b);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, bytes] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(max_gap(bytes, b.at(name)) <= tol);
  }
}

// Samples of the data set as rows, as `cohort-model eval` reads them.
nlohmann::json rows_of(const std::string& data, std::vector<std::int64_t> samples) {
  auto ds = std::make_shared<const core::data::dataset>(data);
  core::data::seq2seq_batch b;
  core::data::fill_seq2seq_batch(*ds, std::move(samples), b);
  const auto rows = [&](const std::vector<std::int64_t>& v, std::int64_t width) {
    nlohmann::json out = nlohmann::json::array();
    for (std::int64_t i = 0; i < b.batch_size; ++i) out.push_back(std::vector<std::int64_t>(v.begin() + i * width, v.begin() + (i + 1) * width));
    return out;
  };
  return {{"input_ids", rows(b.input_ids, b.source_len)},
          {"attention_mask", rows(b.attention_mask, b.source_len)},
          {"labels", rows(b.labels, b.target_len)}};
}

// The first training batch's rows (4 samples of the data set).
nlohmann::json first_rows(const std::string& data) { return rows_of(data, {0, 1, 2, 3}); }

double loss_of(const std::string& hf_dir, const nlohmann::json& rows) {
  auto net = core::model::load_t5_model(hf_dir);
  const auto tensor = [](const nlohmann::json& j) {
    std::vector<std::int64_t> flat;
    for (const auto& row : j)
      for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
    return torch::tensor(flat, torch::kInt64).view({static_cast<std::int64_t>(j.size()), -1});
  };
  torch::NoGradGuard no_grad;
  return net->forward(tensor(rows["input_ids"]), tensor(rows["attention_mask"]), tensor(rows["labels"]))
      .loss.item<double>();
}

}  // namespace

TEST_CASE("a T5 job trains on a seq2seq data set to the same weights under ZeRO 0 and ZeRO 3 on two ranks",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  const auto run0 = tmp.path("zero0"), run3 = tmp.path("zero3");
  const auto r0 = test::run_workload(t5_job(data, 0), run0);
  require_ok(r0);
  CHECK(test::contains_line(r0[0].value->log, "T5 (seq2seq)", "ZeRO stage 0"));
  require_ok(test::run_workload(t5_job(data, 3), run3));
  check_final_tensors_close(run0, run3, 1e-5);
  const auto lines = test::metrics_lines(run3);
  REQUIRE(lines.size() == static_cast<std::size_t>(total_steps));
  CHECK(lines.back()["step"] == total_steps);
  CHECK(lines.back()["loss"].get<double>() < lines.front()["loss"].get<double>());
}

// What `body` returns on each of two ranks running `spec`'s engine (threads over Gloo).
template <typename R>
std::vector<R> on_two_ranks(const config::job_spec& spec,
                            const std::function<R(core::train::seq2seq_engine&)>& body) {
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("t5ranks");
  auto results = test::run_ranks<R>(2, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, 2, prefix));
    core::train::seq2seq_engine engine(spec, *group);
    return body(engine);
  });
  std::vector<R> out;
  for (auto& r : results) {
    REQUIRE(r.error_text() == "");
    out.push_back(*r.value);
  }
  return out;
}

// Each rank's gathered_peak_bytes() after each of two steps, then an evaluation.
std::vector<std::vector<std::int64_t>> gathered_peaks(const config::job_spec& spec) {
  return on_two_ranks<std::vector<std::int64_t>>(spec, [](core::train::seq2seq_engine& engine) {
    std::vector<std::int64_t> peaks;
    for (int i = 0; i < 2; ++i) {
      engine.train_step();
      peaks.push_back(engine.gathered_peak_bytes());
    }
    if (engine.has_eval()) engine.evaluate();
    return peaks;
  });
}

TEST_CASE("a T5 under ZeRO-3 holds unit 0 and at most two blocks gathered at once, not the whole model",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  auto net = core::model::load_t5_model(fixture);
  std::map<std::int64_t, std::int64_t> unit_elements;  // by layer (-1: unit 0)
  for (const auto& p : net->hf_parameters()) unit_elements[p.layer] += p.tensor.numel();
  REQUIRE(unit_elements.size() == 5);  // unit 0, two encoder and two decoder blocks
  std::int64_t whole = 0;
  for (const auto& [layer, n] : unit_elements) whole += test::gathered_unit_bytes(n, 2);
  const auto unit0 = test::gathered_unit_bytes(unit_elements[-1], 2);
  const auto decoder_block = test::gathered_unit_bytes(unit_elements[2], 2);  // the largest blocks

  auto spec = t5_job(data, 3);
  spec.data.eval = tmp.path("pairs");  // 32 samples: every rank runs as many eval batches
  for (const auto& peaks : gathered_peaks(spec)) {
    REQUIRE(peaks.size() == 2);
    for (auto peak : peaks) {
      CHECK(peak == unit0 + 2 * decoder_block);  // the last decoder block and the one before it
      CHECK(peak < whole);
    }
  }
  for (const auto& peaks : gathered_peaks(t5_job(data, 0)))
    for (auto peak : peaks) CHECK(peak == 0);  // stages 0-2 hold whole weights, never gathered
}

TEST_CASE("a T5 evaluation under ZeRO-3 block by block gives the model's loss, a rank with fewer samples included",
          "[core][train][t5]") {
  temp_dir tmp;
  auto spec = t5_job(make_seq2seq_data(tmp, "pairs"), 3);
  spec.data.eval = make_seq2seq_data(tmp, "five", 5);  // rank 0: 3 samples, rank 1: 2 and an empty batch
  const double expected = loss_of(fixture, rows_of(spec.data.eval, {0, 1, 2, 3, 4}));
  for (int stage : {0, 3}) {
    INFO("stage " << stage);
    spec.zero.stage = stage;
    using loss_labels = std::pair<double, std::int64_t>;
    const auto results = on_two_ranks<loss_labels>(spec, [](core::train::seq2seq_engine& e) {
      const auto r = e.evaluate();
      return std::make_pair(r.loss, r.labels);
    });
    for (const auto& [loss, labels] : results) {
      CHECK(labels > 0);
      CHECK(std::abs(loss - expected) <= 1e-5);
    }
  }
}

TEST_CASE("a T5 job stopped after a checkpoint and resumed ends bitwise equal to an uninterrupted one",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  auto spec = t5_job(data, 3);
  spec.data.eval = data;
  spec.train.eval_every = 3;
  const auto whole = tmp.path("whole"), resumed = tmp.path("resumed");
  require_ok(test::run_workload(spec, whole));

  stop_at_step_3(spec, resumed);
  const auto again = test::run_workload(spec, resumed);
  require_ok(again);
  CHECK(test::contains_line(again[0].value->log, "resuming after step", "2"));
  CHECK(final_tensors(whole) == final_tensors(resumed));
  const auto lines = test::metrics_lines(resumed);
  REQUIRE(lines.size() == static_cast<std::size_t>(total_steps));
  CHECK(lines[2].contains("eval_loss"));
  CHECK(lines[2]["eval_loss"].get<double>() > 0);
}

TEST_CASE("a T5 job of 2 ranks stopped after a checkpoint resumes on 1 rank with the same global batch "
          "and ends within 1e-5 of an uninterrupted run",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  const auto two = t5_job(data, 3);  // 2 ranks, 2 micro-batches of 2 each: 8 samples a step
  const auto whole = tmp.path("whole"), resumed = tmp.path("resumed");
  require_ok(test::run_workload(two, whole));

  stop_at_step_3(two, resumed);
  auto one = two;
  one.scaling.num_workers = 1;
  one.train.grad_accum = 4;  // the same 8 samples a step
  const auto again = test::run_workload(one, resumed);
  require_ok(again);
  REQUIRE(again.size() == 1);
  CHECK(test::contains_line(again[0].value->log, "resuming after step", "2"));
  check_final_tensors_close(whole, resumed, 1e-5);
  REQUIRE(test::metrics_lines(resumed).size() == static_cast<std::size_t>(total_steps));
}

TEST_CASE("a T5 job's exported model loads in cohort and cohort-model eval with a lower loss on its training batch",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  const auto run = tmp.path("run");
  require_ok(test::run_workload(t5_job(data, 0), run));
  const auto rows = first_rows(data);
  const double before = loss_of(fixture, rows), after = loss_of(run + "/model", rows);
  CAPTURE(before, after);
  CHECK(after < before);
  const auto file = tmp.write("rows.json", rows.dump());
  const auto r = test::run_tool("cohort-model", "eval --hf-dir " + run + "/model --input-ids " + file);
  REQUIRE(r.code == 0);
  CHECK(std::abs(nlohmann::json::parse(r.out)["loss"].get<double>() - after) <= 1e-5);
}

TEST_CASE("a decoder model with seq2seq data and a T5 with decoder data or LoRA or the fused path are refused naming the field",
          "[core][train][t5]") {
  temp_dir tmp;
  const auto pairs = make_seq2seq_data(tmp, "pairs");
  const auto text = test::make_tiny_dataset(tmp.path("text"));
  const auto refusal = [](const config::job_spec& spec) -> std::string {
    try {
      core::train::check_data_set(spec);
    } catch (const config::spec_error& e) {
      return e.path() + " | " + e.what();
    }
    return "accepted";
  };
  auto decoder = test::tiny_job(pairs, 2, 0, false);
  CHECK_THAT(refusal(decoder), Catch::StartsWith("data.train | ") && Catch::Contains("seq2seq"));
  auto t5 = t5_job(text, 0);
  CHECK_THAT(refusal(t5), Catch::StartsWith("data.train | ") && Catch::Contains("T5"));
  t5.data.train = pairs;
  CHECK(refusal(t5) == "accepted");
  auto lora = t5;
  lora.model.lora.enabled = true;
  CHECK_THAT(refusal(lora), Catch::StartsWith("model.lora | "));
  auto fused = t5;
  fused.train.path = config::compute_path::fused;
  CHECK_THAT(refusal(fused), Catch::StartsWith("train.compute_path | ") && Catch::Contains("\"automatic\""));
  auto recompute = t5;
  recompute.train.activation_checkpointing = true;
  CHECK_THAT(refusal(recompute), Catch::StartsWith("train.activation_checkpointing | "));
}

TEST_CASE("a T5's memory plan counts its parameters exactly and unit 0 plus two decoder blocks gathered at ZeRO-3",
          "[core][train][t5][memory]") {
  const auto spec = t5_job("unused", 3);
  const auto shape = core::train::read_model_shape(spec.model);
  auto net = core::model::load_t5_model(fixture);
  CHECK(shape.parameters == net->parameter_count());
  std::map<std::int64_t, std::int64_t> unit_elements;  // by layer (-1: unit 0)
  for (const auto& p : net->hf_parameters()) unit_elements[p.layer] += p.tensor.numel();
  CHECK(shape.outer_parameters == unit_elements[-1]);
  CHECK(shape.largest_layer_parameters == unit_elements[2]);  // a decoder block
  const auto e = core::train::estimate_memory(spec, shape);
  double gathered = -1;
  for (const auto& item : e.per_rank.items)
    if (item.name == "gathered compute weights") gathered = item.bytes;
  CHECK(gathered == 4.0 * static_cast<double>(unit_elements[-1] + 2 * unit_elements[2]));
  CHECK(gathered < 4.0 * static_cast<double>(shape.parameters));
}

TEST_CASE("a T5 job in bf16 trains its fp32 masters under ZeRO 2 and its loss goes down", "[core][train][t5]") {
  temp_dir tmp;
  const auto data = make_seq2seq_data(tmp, "pairs");
  auto spec = t5_job(data, 2);
  spec.train.dtype = config::precision::bf16;
  const auto run = tmp.path("run");
  require_ok(test::run_workload(spec, run));
  const auto lines = test::metrics_lines(run);
  REQUIRE(lines.size() == static_cast<std::size_t>(total_steps));
  CHECK(lines.back()["loss"].get<double>() < lines.front()["loss"].get<double>());
  CHECK(final_tensors(run).at("param/shared.weight").size() == 128 * 32 * sizeof(float));
}
