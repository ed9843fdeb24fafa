// The parsed job spec as a typed message (actors/job_spec_fields.hpp): a spec with every field set
// off its default crosses the wire in a trainer_setup and the worker's setup file unchanged, and a
// field that does not fit is refused naming it.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/wire_protocol.hpp"
#include "actors/worker_process_link.hpp"
#include "net/json_inspector.hpp"

using namespace cohort;
using config::job_spec;

namespace {

// Every field off its default (the model as a fine-tune with LoRA, or pretrained from an inline
// config: the two exclude each other).
job_spec every_field_set(bool fine_tune) {
  job_spec s;
  s.name = "every-field";
  s.workload = config::workload_kind::causal_lm;
  if (fine_tune) {
    s.model.hf_dir = "/models/tiny";
    s.model.lora.enabled = true;
    s.model.lora.r = 4;
    s.model.lora.alpha = 16;
    s.model.lora.dropout = 0.05;
    s.model.lora.target_modules = {"q_proj", "v_proj"};
    s.model.lora.base_dtype = config::precision::bf16;
    s.model.added_tokens = "/data/tokens.json";
    s.model.pad_vocab_to_multiple_of = 64;
  } else {
    s.model.inline_config_json = R"({"model_type":"llama","vocab_size":257})";
    s.model.init_seed = 42;
  }
  s.data.train = "s3://bucket/train";
  s.data.eval = "/data/eval";
  s.data.cache_dir = "/cache";
  s.data.cache_bytes = 3u << 20;
  s.data.verify = false;
  s.scaling.num_workers = 4;
  s.scaling.min_workers = 2;
  s.scaling.resize_interval_s = 7.5;
  s.scaling.use_gpu = true;
  s.scaling.resources_per_worker = {{"CPU", 2}, {"GPU", 0.5}};
  s.scaling.trainer_resources = {{"large_cpu_mem", 0.01}};
  s.scaling.strategy = config::placement_strategy::strict_spread;
  s.scaling.nodes = {"n1", "n2"};
  s.scaling.bind_cores_to_rank = true;
  auto& t = s.train;
  t.seq_len = 64;
  t.micro_batch_size = 3;
  t.grad_accum = 5;
  t.epochs = 7;
  t.max_steps = 99;
  t.as_test = true;
  t.lr = 0.25;
  t.beta1 = 0.8;
  t.beta2 = 0.95;
  t.eps = 1e-6;
  t.warmup_steps = 11;
  t.schedule = config::lr_schedule::linear;
  t.min_lr_ratio = 0.1;
  t.weight_decay = 0.01;
  t.grad_clip = 0.5;
  t.dtype = config::precision::bf16;
  t.seed = 1234;
  t.log_every = 3;
  t.activation_checkpointing = true;
  t.path = config::compute_path::fused;
  t.loss_chunk_tokens = 512;
  t.deterministic = true;
  t.cuda_graph = false;
  t.step_delay_s = 0.125;
  t.eval_every = 9;
  s.zero.stage = 3;
  s.zero.offload_optimizer = config::offload_device::cpu;
  s.zero.offload_param = config::offload_device::cpu;
  s.zero.delayed_param_update = true;
  s.zero.layers_kept_gathered = 5;
  auto& r = s.run;
  r.storage_path = "s3://bucket/runs";
  r.s3_endpoint = "http://127.0.0.1:9000";
  r.local_dir = "/scratch";
  r.checkpoint = {10, 2, "eval_loss", config::score_order::max, true, 1u << 20, true, 5, 20, 3, false};
  r.failure = {-1, 60, 300, 200, 15, 4, 900};
  r.resume = false;
  r.hold_before_step = 4;
  r.hold_before_steps = {4, 8};
  r.sample_log = true;
  r.profile_steps = {3, 4};
  r.memory_status_every_s = 2.5;
  s.runtime_env.env_vars = {{"NCCL_DEBUG", "INFO"}};
  return s;
}

// The third way a spec names its model, a config file (with another workload, for the fields'
// sake: the wire does not check what goes together).
job_spec every_field_set_from_config_file() {
  job_spec s = every_field_set(false);
  s.model.inline_config_json.clear();
  s.model.config_file = "/models/config.json";
  s.workload = config::workload_kind::linear_regression;
  return s;
}

// Values that are maps or free JSON, not sections of the spec: their paths are leaves.
const std::set<std::string> map_values{"scaling.resources_per_worker", "scaling.trainer_resources",
                                       "runtime_env.env_vars", "model.config"};

// The dotted paths of `j`'s leaves ("train.lr", ...).
void leaf_paths(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  if (!j.is_object() || map_values.count(prefix)) {
    out.insert(prefix);
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    leaf_paths(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
}

std::set<std::string> leaf_paths(const nlohmann::json& j) {
  std::set<std::string> out;
  leaf_paths(j, "", out);
  return out;
}

// The wire's leaves whose value in `a` differs from `b`'s.
void differing(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix,
               std::set<std::string>& out) {
  if (!a.is_object() || map_values.count(prefix)) {
    if (a != b) out.insert(prefix);
    return;
  }
  for (auto it = a.begin(); it != a.end(); ++it)
    differing(*it, b.at(it.key()), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
}

// The spec's wire fields: the JSON view of the inspect lists.
std::set<std::string> wire_fields() { return leaf_paths(net::to_json_view(job_spec{})); }

// The spec file's keys: the canonical text of specs with every field set, the model both ways. The
// wire carries model.config as config_file (a path) or inline_config (the object).
std::set<std::string> spec_keys() {
  std::set<std::string> keys;
  for (const auto& spec :
       {every_field_set(true), every_field_set(false), every_field_set_from_config_file()}) {
    for (const auto& k : leaf_paths(nlohmann::json::parse(config::to_json_text(spec)))) keys.insert(k);
  }
  return keys;
}

}  // namespace

TEST_CASE("the spec sent in tests sets every field the wire carries", "[actors]") {
  std::set<std::string> set;
  for (const auto& spec : {every_field_set(true), every_field_set(false), every_field_set_from_config_file()})
    differing(net::to_json_view(spec), net::to_json_view(job_spec{}), "", set);
  for (const auto& f : wire_fields()) {
    INFO(f);
    CHECK(set.count(f));
  }
}

TEST_CASE("the wire names every key of the spec file as the file does", "[actors]") {
  const auto wire = wire_fields();
  for (const auto& key : spec_keys()) {
    INFO(key);
    if (key == "model.config") {
      CHECK(wire.count("model.config_file"));
      CHECK(wire.count("model.inline_config"));
      continue;
    }
    CHECK(wire.count(key));
  }
}

TEST_CASE("docs/job-spec.md documents every key of the spec file", "[actors]") {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/docs/job-spec.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& key : spec_keys()) {
    INFO(key);
    CHECK(text.str().find("| `" + key + "` |") != std::string::npos);
  }
}

TEST_CASE("a spec with every field set crosses the wire in a trainer_setup unchanged", "[actors]") {
  for (bool fine_tune : {true, false}) {
    actors::trainer_setup setup;
    setup.job_id = "job-0001";
    setup.spec = every_field_set(fine_tune);
    setup.rank_nodes = {"n1"};
    const auto codec = actors::make_wire_codec();
    const std::string frame = codec->encode(setup);
    const auto decoded = codec->decode(frame.data(), frame.size());
    REQUIRE(decoded.ok());
    REQUIRE(decoded.message.match_element<actors::trainer_setup>(0));
    const auto& got = decoded.message.get_as<actors::trainer_setup>(0).spec;
    CHECK(config::to_json_text(got) == config::to_json_text(setup.spec));
    CHECK(got.train.as_test);  // not part of the canonical text
    CHECK(got.model.lora.base_dtype == setup.spec.model.lora.base_dtype);
  }
}

TEST_CASE("a spec with every field set reaches a worker process through its setup file unchanged",
          "[actors]") {
  for (bool fine_tune : {true, false}) {
    actors::worker_setup setup;
    setup.job_id = "job-0001";
    setup.spec = every_field_set(fine_tune);
    const auto back = actors::worker_setup_from_json(actors::worker_setup_to_json(setup));
    CHECK(config::to_json_text(back.spec) == config::to_json_text(setup.spec));
    CHECK(back.spec.train.as_test);
    CHECK(back.spec.model.lora.base_dtype == setup.spec.model.lora.base_dtype);
  }
}

TEST_CASE("a spec field of a setup that does not fit is refused naming the field and the values "
          "allowed",
          "[actors]") {
  actors::worker_setup setup;
  setup.spec = every_field_set(true);
  auto view = nlohmann::json::parse(actors::worker_setup_to_json(setup));
  SECTION("an enum given a name it does not have") {
    view["spec"]["train"]["schedule"] = "cyclic";
    CHECK_THROWS_WITH(actors::worker_setup_from_json(view.dump()),
                      Catch::StartsWith("worker_setup.spec.train.schedule: expected one of ") &&
                          Catch::Contains("linear"));
  }
  SECTION("a number where a text belongs") {
    view["spec"]["run"]["checkpoint"]["score_attribute"] = 3;
    CHECK_THROWS_WITH(actors::worker_setup_from_json(view.dump()),
                      Catch::StartsWith("worker_setup.spec.run.checkpoint.score_attribute: expected a string"));
  }
}

TEST_CASE(
    "a setup from a peer that does not send scaling.resize_interval_s reads its default, and one "
    "without another field is refused naming it",
    "[actors]") {
  actors::worker_setup sent;
  sent.spec = every_field_set(true);
  auto view = nlohmann::json::parse(actors::worker_setup_to_json(sent));
  auto& scaling = view["spec"]["scaling"];
  scaling.erase("resize_interval_s");  // newer than its peers: the wire may lack it
  const auto back = actors::worker_setup_from_json(view.dump());
  CHECK(back.spec.scaling.resize_interval_s == config::scaling_spec{}.resize_interval_s);
  CHECK(back.spec.scaling.min_workers == sent.spec.scaling.min_workers);
  scaling.erase("min_workers");  // every peer sends it
  CHECK_THROWS_WITH(actors::worker_setup_from_json(view.dump()),
                    Catch::Contains("worker_setup.spec.scaling.min_workers"));
}
