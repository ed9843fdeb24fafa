// What a run writes for people watching it: TensorBoard event files (rank 0), the per-rank memory
// status CSVs and `cohort-mem compare` over them, and evaluation of data.eval (eval_loss in
// metrics.jsonl, event files and checkpoint manifests; retention by it).
#include "core/model/runner.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "core/train/event_file.hpp"
#include "core/train/memory_report.hpp"
#include "core/train/memory_status.hpp"
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

using namespace cohort;
using cohort::test::temp_dir;
namespace fs = std::filesystem;
using core::train::event_record;

namespace {

// The event files under <run>/tensorboard, sorted by name.
std::vector<std::string> event_files(const std::string& run_dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(run_dir + "/tensorboard")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::map<std::string, float> scalars_of(const event_record& r) {
  std::map<std::string, float> out;
  for (const auto& [tag, value] : r.scalars) out[tag] = value;
  return out;
}

// Checks that the event records after the first hold exactly the metrics lines' steps and values.
void check_events_match_metrics(const std::vector<event_record>& events, const std::vector<nlohmann::json>& lines) {
  REQUIRE(events.size() == lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO("metrics line " << lines[i].dump());
    CHECK(events[i].step == lines[i]["step"].get<std::int64_t>());
    CHECK(events[i].wall_time > 1.6e9);
    const auto scalars = scalars_of(events[i]);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "eval_loss", "eval_perplexity"}) {
      INFO(key);
      CHECK(scalars.count(key) == lines[i].count(key));
      if (lines[i].count(key)) CHECK(scalars.at(key) == static_cast<float>(lines[i][key].get<double>()));
    }
    REQUIRE(scalars.count("memory/host_peak_rss_bytes") == 1);
    CHECK(scalars.at("memory/host_peak_rss_bytes") > 0);
  }
}

struct csv_row {
  double wall_time;
  std::int64_t step, rss, rss_peak;
  std::string gpu;  // the three GPU cells as written
};

std::vector<csv_row> read_memory_csv(const std::string& path, int* headers) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<csv_row> rows;
  *headers = 0;
  for (std::string line; std::getline(in, line);) {
    if (line == core::train::memory_csv_header) {
      ++*headers;
      continue;
    }
    std::stringstream cells(line);
    std::string c[7];
    for (auto& cell : c) std::getline(cells, cell, ',');
    rows.push_back({std::stod(c[0]), std::stoll(c[1]), std::stoll(c[2]), std::stoll(c[3]), c[4] + "," + c[5] + "," + c[6]});
  }
  return rows;
}

// 12 samples of exactly 16 ids, no loss mask: every position after the first is a label, as
// `cohort-model eval` counts them.
std::string make_eval_dataset(const std::string& dir, core::model::token_rows* rows = nullptr) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = 300;
  core::data::shard_writer w(dir, o);
  std::uint64_t state = 999;
  for (int i = 0; i < 12; ++i) {
    std::vector<std::int32_t> ids;
    std::vector<std::int64_t> row;
    for (int t = 0; t < 16; ++t) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const std::int32_t id = t > 0 && (state >> 40) % 4 != 0 ? 3 + (ids.back() - 3 + 1) % 256
                                                              : static_cast<std::int32_t>(3 + (state >> 33) % 256);
      ids.push_back(id);
      row.push_back(id);
    }
    w.append(ids.data(), 16, nullptr);
    if (rows) rows->push_back(row);
  }
  core::data::manifest m;
  m.kind = "pretrain";
  m.layout = "pad";
  m.seq_len = 16;
  m.pad_id = 0;
  m.eos_id = 2;
  m.vocab_size = 300;
  w.finish(m);
  return dir;
}

// evaluate() of the untrained model on `world` ranks, twice (rank 0's answer; all ranks and both
// evaluations must agree).
double eval_loss_on(const config::job_spec& spec) {
  const int world = spec.scaling.num_workers;
  auto store = std::make_shared<core::comm::memory_store>();
  const auto prefix = test::unique_prefix("eval");
  using two_evals = std::pair<core::train::eval_result, core::train::eval_result>;
  auto results = test::run_ranks<two_evals>(world, [&](int rank) {
    auto group = core::comm::make_process_group(test::gloo_options(store, rank, world, prefix));
    core::train::causal_lm_engine engine(spec, *group);
    auto first = engine.evaluate();
    return two_evals{first, engine.evaluate()};
  });
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  for (const auto& r : results) {
    CHECK(r.value->first.loss == results[0].value->first.loss);
    CHECK(r.value->second.loss == r.value->first.loss);  // no dropout, nothing changed
    CHECK(r.value->first.labels == results[0].value->first.labels);
  }
  CHECK(results[0].value->first.labels > 0);
  return results[0].value->first.loss;
}

}  // namespace

TEST_CASE("an event file's records carry valid masked CRC32Cs and decode back to the scalars written",
          "[core][train]") {
  // The CRC32C check value of "123456789" (RFC 3720).
  CHECK(core::train::crc32c("123456789", 9) == 0xE3069283u);
  temp_dir tmp;
  std::string path;
  {
    core::train::event_file_writer w(tmp.path("tb"), "attempt-0");
    path = w.path();
    w.add_scalars(3, {{"loss", 2.5}, {"lr", 1e-4}}, 1700000000.25);
    w.add_scalars(1LL << 40, {{"a/b", -0.125}}, 1700000001.5);
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const auto records = core::train::read_event_file(path);
  REQUIRE(records.size() == 3);
  CHECK(records[0].file_version == "brain.Event:2");
  CHECK(records[0].scalars.empty());
  CHECK(records[1].step == 3);
  CHECK(records[1].wall_time == 1700000000.25);
  REQUIRE(records[1].scalars.size() == 2);
  CHECK(records[1].scalars[0] == std::make_pair(std::string("loss"), 2.5f));
  CHECK(records[1].scalars[1] == std::make_pair(std::string("lr"), 1e-4f));
  CHECK(records[2].step == (1LL << 40));
  CHECK(records[2].scalars == std::vector<std::pair<std::string, float>>{{"a/b", -0.125f}});

  // A second writer in the same second gets a file of its own.
  core::train::event_file_writer again(tmp.path("tb"), "attempt-0");
  CHECK(again.path() != path);

  // One flipped byte in a record's data fails its CRC, named.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes[bytes.size() - 6] ^= 0x01;
  const std::string bad = tmp.write("bad/events.out.tfevents.1.x", bytes);
  CHECK_THROWS_WITH(core::train::read_event_file(bad), Catch::Contains("data CRC mismatch") && Catch::Contains(bad));
}

TEST_CASE("a two-rank job's TensorBoard event file holds exactly the logged steps' values of metrics.jsonl",
          "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 2, false);
  spec.train.max_steps = 6;
  spec.train.log_every = 2;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto files = event_files(tmp.path("run"));
  REQUIRE(files.size() == 1);
  CHECK(fs::path(files[0]).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const auto records = core::train::read_event_file(files[0]);
  REQUIRE(records.size() == 4);
  CHECK(records[0].file_version == "brain.Event:2");
  const auto lines = test::metrics_lines(tmp.path("run"));
  REQUIRE(lines.size() == 3);
  check_events_match_metrics({records.begin() + 1, records.end()}, lines);
}

TEST_CASE("each attempt of a resumed run writes a TensorBoard file of its own with only its steps",
          "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 1, false);
  spec.train.schedule = config::lr_schedule::constant;
  spec.train.max_steps = 4;
  spec.run.checkpoint.every_steps = 2;
  spec.run.memory_status_every_s = 3600;  // only the per-step samples come within the test
  const auto first = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : first) REQUIRE(r.error_text() == "");
  spec.train.max_steps = 6;
  test::run_options second;
  second.attempt = 1;
  const auto again = test::run_workload(spec, tmp.path("run"), second);
  for (const auto& r : again) REQUIRE(r.error_text() == "");

  const auto files = event_files(tmp.path("run"));
  REQUIRE(files.size() == 2);
  std::vector<std::int64_t> steps_of_first, steps_of_second;
  std::vector<event_record> attempt_one;
  for (const auto& file : files) {
    const auto records = core::train::read_event_file(file);
    REQUIRE(!records.empty());
    CHECK(records[0].file_version == "brain.Event:2");
    const bool second_attempt = file.find("attempt-1") != std::string::npos;
    for (std::size_t i = 1; i < records.size(); ++i) {
      (second_attempt ? steps_of_second : steps_of_first).push_back(records[i].step);
      if (second_attempt) attempt_one.push_back(records[i]);
    }
  }
  CHECK(steps_of_first == std::vector<std::int64_t>{1, 2, 3, 4});
  CHECK(steps_of_second == std::vector<std::int64_t>{5, 6});
  const auto lines = test::metrics_lines(tmp.path("run"));
  REQUIRE(lines.size() == 6);
  check_events_match_metrics(attempt_one, {lines.begin() + 4, lines.end()});

  // The memory CSVs were appended to: one header each, the steps of both attempts.
  for (int rank = 0; rank < 2; ++rank) {
    int headers = 0;
    const auto rows = read_memory_csv(tmp.path("run/memory/rank-" + std::to_string(rank) + ".csv"), &headers);
    CHECK(headers == 1);
    std::vector<std::int64_t> steps;
    for (const auto& r : rows) steps.push_back(r.step);
    CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6});
  }
}

TEST_CASE("with memory_status_every_s each rank writes a memory CSV with every logged step, monotone, with RSS",
          "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 3, false);
  spec.train.max_steps = 5;
  spec.train.log_every = 2;
  spec.run.memory_status_every_s = 0.01;  // timed samples come too, as many as the machine allows
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    int headers = 0;
    const auto rows = read_memory_csv(tmp.path("run/memory/rank-" + std::to_string(rank) + ".csv"), &headers);
    CHECK(headers == 1);
    REQUIRE(rows.size() >= 3);
    std::set<std::int64_t> steps;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i > 0) CHECK(rows[i].step >= rows[i - 1].step);
      if (i > 0) CHECK(rows[i].wall_time >= rows[i - 1].wall_time);
      CHECK(rows[i].rss > 0);
      CHECK(rows[i].rss_peak >= rows[i].rss);
      CHECK(rows[i].gpu == ",,");  // CPU: no GPU figures
      steps.insert(rows[i].step);
    }
    // The logged steps 2, 4 and 5 each have their sample; timed ones carry 0..5.
    for (const std::int64_t s : {2, 4, 5}) CHECK(steps.count(s) == 1);
    for (const auto s : steps) CHECK((s >= 0 && s <= 5));
  }
}

TEST_CASE("cohort-mem compare prints two runs' per-rank peaks and means side by side", "[core][train]") {
  temp_dir tmp;
  const std::string header = std::string(core::train::memory_csv_header) + "\n";
  const std::int64_t MiB = 1 << 20;
  auto row = [&](double t, int step, std::int64_t rss, std::int64_t peak, const std::string& gpu) {
    return std::to_string(t) + "," + std::to_string(step) + "," + std::to_string(rss * MiB) + "," +
           std::to_string(peak * MiB) + "," + gpu + "\n";
  };
  tmp.write("a/memory/rank-0.csv", header + row(1, 1, 100, 120, ",,") + row(2, 2, 200, 220, ",,"));
  tmp.write("a/memory/rank-1.csv", header + row(1, 1, 50, 50, ",,"));
  tmp.write("b/memory/rank-0.csv",
            header + row(1, 1, 10, 10, std::to_string(4 * MiB) + "," + std::to_string(8 * MiB) + "," + std::to_string(6 * MiB)) +
                row(2, 2, 30, 40, std::to_string(2 * MiB) + "," + std::to_string(16 * MiB) + "," + std::to_string(6 * MiB)));
  tmp.write("b/memory/notes.txt", "not a rank file");
  const std::string a = tmp.path("a"), b = tmp.path("b");
  CHECK(core::train::compare_memory(a, b, false) ==
        "A: " + a + "\nB: " + b + "\n" +
            "rank  MiB                  A peak       A mean       B peak       B mean\n"
            "0     rss                   220.0        150.0         40.0         20.0\n"
            "0     gpu_allocated             -            -          6.0          3.0\n"
            "0     gpu_reserved              -            -         16.0         12.0\n"
            "1     rss                    50.0         50.0            -            -\n"
            "1     gpu_allocated             -            -            -            -\n"
            "1     gpu_reserved              -            -            -            -\n");
  const auto j = nlohmann::json::parse(core::train::compare_memory(a, b, true));
  CHECK(j["a"] == a);
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["a"]["samples"] == 2);
  CHECK(j["ranks"][0]["a"]["rss"]["peak_bytes"] == 220 * MiB);
  CHECK(j["ranks"][0]["a"]["gpu_allocated"].is_null());
  CHECK(j["ranks"][0]["b"]["gpu_reserved"]["mean_bytes"] == 12.0 * MiB);
  CHECK(j["ranks"][1]["b"].is_null());

  using core::train::memory_report_error;
  CHECK_THROWS_WITH(core::train::compare_memory(tmp.path("missing"), b, false),
                    Catch::Contains(tmp.path("missing")) && Catch::Contains("no such run directory"));
  tmp.write("c/metrics.jsonl", "");
  CHECK_THROWS_WITH(core::train::compare_memory(a, tmp.path("c"), false),
                    Catch::Contains(tmp.path("c/memory")) && Catch::Contains("memory_status_every_s"));
  tmp.write("d/memory/rank-0.csv", header + row(1, 1, 10, 10, ",,") + "1.0,2,abc,5,,,\n");
  CHECK_THROWS_WITH(core::train::compare_memory(a, tmp.path("d"), false),
                    Catch::Contains(tmp.path("d/memory/rank-0.csv") + ":3:") && Catch::Contains("rss_bytes") &&
                        Catch::Contains("\"abc\""));
  tmp.write("e/memory/rank-0.csv", header + "1.0,2,3\n");
  CHECK_THROWS_WITH(core::train::compare_memory(a, tmp.path("e"), false),
                    Catch::Contains(tmp.path("e/memory/rank-0.csv") + ":2:") && Catch::Contains("7 comma-separated"));
  tmp.write("f/memory/rank-0.csv", "time,rss\n");
  CHECK_THROWS_WITH(core::train::compare_memory(a, tmp.path("f"), false),
                    Catch::Contains(tmp.path("f/memory/rank-0.csv") + ":1:") && Catch::Contains("header"));
}

TEST_CASE("eval_loss of the same model state is the same on one, two and three ranks and under ZeRO-3",
          "[core][train]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto eval = test::make_tiny_dataset(tmp.path("eval"));  // masks and varied lengths; 96 samples
  auto spec = test::tiny_job(data, 1, 0, false);
  spec.data.eval = eval;
  spec.model.inline_config_json = [&] {  // dropout on: evaluation must switch it off
    auto c = nlohmann::json::parse(test::tiny_llama_config());
    c["attention_dropout"] = 0.5;
    return c.dump();
  }();
  spec.train.micro_batch_size = 5;  // 96 samples: uneven shares on 3 ranks, partial batches
  const double one = eval_loss_on(spec);
  CHECK(one > 1.0);
  for (const int world : {2, 3}) {
    for (const int stage : {0, 3}) {
      INFO("world " << world << ", stage " << stage);
      auto s = spec;
      s.scaling.num_workers = world;
      s.train.grad_accum = 1;
      s.zero.stage = stage;
      CHECK(std::abs(eval_loss_on(s) - one) < 1e-6);
    }
  }
}

TEST_CASE("eval_loss lands in metrics.jsonl, events and manifests and equals cohort-model eval of the exported model",
          "[core][train]") {
  temp_dir tmp;
  core::model::token_rows rows;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 2, 3, false);
  spec.data.eval = make_eval_dataset(tmp.path("eval"), &rows);
  spec.train.max_steps = 5;
  spec.train.log_every = 4;
  spec.train.eval_every = 2;
  spec.run.checkpoint.every_steps = 2;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto lines = test::metrics_lines(tmp.path("run"));
  std::vector<std::int64_t> steps, evaluated;
  for (const auto& l : lines) {
    steps.push_back(l["step"].get<std::int64_t>());
    if (l.contains("eval_loss")) {
      evaluated.push_back(l["step"].get<std::int64_t>());
      CHECK(l["eval_perplexity"].get<double>() == Approx(std::exp(l["eval_loss"].get<double>())).epsilon(1e-12));
    }
  }
  CHECK(steps == std::vector<std::int64_t>{2, 4, 5});  // evaluated steps are always logged
  CHECK(evaluated == std::vector<std::int64_t>{2, 4, 5});
  check_events_match_metrics(
      [&] {
        auto r = core::train::read_event_file(event_files(tmp.path("run"))[0]);
        return std::vector<event_record>(r.begin() + 1, r.end());
      }(),
      lines);
  // The reports carry it too.
  const auto& reports = results[0].value->reports;
  REQUIRE(!reports.empty());
  CHECK(reports.back().evaluated);
  CHECK(reports.back().eval_loss == lines.back()["eval_loss"].get<double>());
  // Every checkpoint's manifest records its step's eval_loss.
  for (const auto& c : core::ckpt::list_checkpoints(tmp.path("run"))) {
    const auto m = core::ckpt::read_manifest(c.path);
    const auto line = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l["step"] == c.step; });
    REQUIRE(line != lines.end());
    REQUIRE(m.metrics.contains("eval_loss"));
    CHECK(m.metrics["eval_loss"].get<double>() == (*line)["eval_loss"].get<double>());
  }
  // The final step's eval_loss is what cohort-model eval computes on the exported model.
  const auto reference = core::model::evaluate(tmp.path("run/model"), rows);
  CHECK(lines.back()["eval_loss"].get<double>() == Approx(reference.loss).epsilon(1e-5));
}

TEST_CASE("retention by eval_loss keeps the checkpoints best by it and the newest", "[core][train]") {
  temp_dir tmp;
  auto spec = test::tiny_job(test::make_tiny_dataset(tmp.path("data")), 1, 0, false);
  spec.data.eval = make_eval_dataset(tmp.path("eval"));
  spec.train.max_steps = 6;
  spec.train.eval_every = 1;
  spec.run.checkpoint.every_steps = 1;
  spec.run.checkpoint.num_to_keep = 3;
  spec.run.checkpoint.score_attribute = "eval_loss";
  // Highest first: the early steps win, which newest-first retention would have deleted.
  spec.run.checkpoint.order = config::score_order::max;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto lines = test::metrics_lines(tmp.path("run"));
  REQUIRE(lines.size() == 6);
  std::vector<std::pair<double, std::int64_t>> by_loss;  // steps 1-5 (6 is the newest, always kept)
  for (const auto& l : lines)
    if (l["step"] != 6) by_loss.emplace_back(l["eval_loss"].get<double>(), l["step"].get<std::int64_t>());
  std::sort(by_loss.rbegin(), by_loss.rend());
  const std::set<std::uint64_t> expected{static_cast<std::uint64_t>(by_loss[0].second),
                                         static_cast<std::uint64_t>(by_loss[1].second), 6};
  std::set<std::uint64_t> kept;
  for (const auto& c : core::ckpt::list_checkpoints(tmp.path("run"))) kept.insert(c.step);
  CHECK(kept == expected);
  CHECK(kept != std::set<std::uint64_t>{4, 5, 6});  // the model learns: not simply the newest
}
