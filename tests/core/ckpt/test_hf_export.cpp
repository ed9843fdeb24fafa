// Exporting checkpoints of real (tiny) models to Hugging Face directories: what is written must
// be what save_hf_model writes for the same weights, loadable by load_hf_model, streamed through
// one buffer; bad checkpoints and options are refused; the cohort-ckpt export command.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

#include "core/ckpt/bf16.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/ckpt/writer.hpp"
#include "core/model/decoder.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/lora_config.hpp"
#include "core/model/safetensors.hpp"

#include "tests/support/catch_torch.hpp"

#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tool_run.hpp"

namespace fs = std::filesystem;
namespace model = cohort::core::model;
using namespace cohort::core::ckpt;
using cohort::test::read_file;
using cohort::test::run_tool;
using cohort::test::temp_dir;
using cohort::test::tool_result;
using nlohmann::json;

namespace {

const json tiny_llama = {{"model_type", "llama"},       {"vocab_size", 40},         {"hidden_size", 16},
                         {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                         {"intermediate_size", 24},     {"tie_word_embeddings", false}};
const json tiny_gpt2 = {{"model_type", "gpt2"}, {"vocab_size", 40}, {"n_embd", 16},
                        {"n_layer", 2},         {"n_head", 2},      {"n_positions", 16}};  // tied

model::decoder make_model(const json& config, std::uint64_t seed) {
  torch::manual_seed(seed);
  return model::decoder(model::parse_config(config, "test config"));
}

// Appends the flat fp32 values of `t` to `out`.
void append_flat(std::vector<float>& out, const torch::Tensor& t) {
  const auto c = t.detach().to(torch::kFloat).contiguous();
  out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

struct flat_weights {
  std::vector<std::string> names;  // logical tensor names
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::uint64_t> offsets;
  std::vector<float> values;
};

// Stored tensor `key` of a rank holding [begin, end) of the flat concatenation, with a slice per
// logical tensor it touches: ZeRO's flat partition across parameter boundaries.
shard_tensor flat_shard(const std::string& key, const flat_weights& w, std::uint64_t begin, std::uint64_t end) {
  shard_tensor s{key, "F32", {static_cast<std::int64_t>(end - begin)}, w.values.data() + begin, (end - begin) * 4, {}};
  for (std::size_t i = 0; i < w.names.size(); ++i) {
    const std::uint64_t lo = w.offsets[i], hi = w.offsets[i + 1];
    const std::uint64_t a = std::max(lo, begin), b = std::min(hi, end);
    if (a < b) s.slices.push_back({w.names[i], w.shapes[i], a - lo, b - a, a - begin});
  }
  return s;
}

// Writes and commits a `world`-rank checkpoint of the model: every weight as param/<hf name> and a
// made-up exp_avg/<hf name>, each flattened in hf_parameters() order and split evenly, so each
// rank's stored "flat.param" holds slices of several weights. `extra_params` are added as well.
manifest write_tensors_checkpoint(const std::string& dir, const std::vector<model::hf_parameter>& weights,
                                  int world, const json& extra,
                                  const std::map<std::string, torch::Tensor>& extra_params = {}) {
  flat_weights params, moments;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    for (auto* w : {&params, &moments}) {
      w->names.push_back((w == &params ? "param/" : "exp_avg/") + name);
      w->shapes.push_back(t.sizes().vec());
      w->offsets.push_back(w->values.size());
      append_flat(w->values, w == &params ? t : t * 0.5);
    }
  };
  for (const auto& p : weights) add(p.name, p.tensor);
  for (const auto& [name, t] : extra_params) add(name, t);
  params.offsets.push_back(params.values.size());
  moments.offsets.push_back(moments.values.size());

  const std::int64_t step_count = 7;
  std::vector<rank_report> reports;
  for (int r = 0; r < world; ++r) {
    const flat_range range = even_partition(params.values.size(), world, r);
    REQUIRE(range.length > 0);
    std::vector<shard_tensor> tensors{flat_shard("flat.param", params, range.offset, range.offset + range.length),
                                      flat_shard("flat.exp_avg", moments, range.offset, range.offset + range.length),
                                      {"step_count", "I64", {1}, &step_count, 8, {}}};
    REQUIRE(tensors[0].slices.size() > 1);  // a rank holds pieces of several weights
    rank_state state;
    state.step = 40;
    reports.push_back(write_rank_shard(dir, r, tensors, state));
  }
  return commit_checkpoint(dir, 40, world, reports, json::object(), extra);
}

manifest write_model_checkpoint(const std::string& dir, const model::decoder_impl& m, int world, const json& extra,
                                const std::map<std::string, torch::Tensor>& extra_params = {}) {
  return write_tensors_checkpoint(dir, m.hf_parameters(), world, extra, extra_params);
}

json extra_for(const model::decoder_impl& m, const std::vector<std::string>& tokenizer_files = {}) {
  return {{"model_config", model::to_hf_json(m.config())}, {"tokenizer_files", tokenizer_files}};
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> tensor_names(const fs::path& file) {
  std::vector<std::string> out;
  const model::safetensors_reader reader(file.string());
  for (const auto& e : reader.tensors()) out.push_back(e.name);
  return out;
}

std::uint64_t largest_fp32_bytes(const model::decoder_impl& m) {
  std::uint64_t n = 0;
  for (const auto& p : m.hf_parameters()) n = std::max<std::uint64_t>(n, p.tensor.numel() * 4);
  return n;
}

// Every weight of `loaded` equals the same-named weight of `reference` converted to `dtype`, bitwise.
void check_same_weights(const model::decoder_impl& loaded, const model::decoder_impl& reference,
                        torch::ScalarType dtype) {
  std::map<std::string, torch::Tensor> want;
  for (const auto& p : reference.hf_parameters()) want[p.name] = p.tensor.detach().to(dtype);
  REQUIRE(loaded.hf_parameters().size() == want.size());
  for (const auto& p : loaded.hf_parameters()) {
    INFO(p.name);
    REQUIRE(want.count(p.name) == 1);
    CHECK(p.tensor.scalar_type() == dtype);
    CHECK(torch::equal(p.tensor, want.at(p.name)));
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ckpt_error& e) {
    return e.what();
  }
  FAIL("no ckpt_error was thrown");
  return "";
}

}  // namespace

TEST_CASE("A 3-rank ZeRO checkpoint of a Llama exports in fp32 exactly as save_hf_model writes it",
          "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 11);
  const std::string ckpt = step_dir(tmp.path(), 40);
  write_model_checkpoint(ckpt, *m, 3, extra_for(*m));

  const hf_export_stats stats = export_hf(ckpt, tmp.path("out"));
  model::save_hf_model(*m, tmp.path("ref"));

  CHECK(listing(tmp.path("out")) == listing(tmp.path("ref")));
  CHECK(stats.files == std::vector<std::string>{"config.json", "model.safetensors"});
  CHECK(tensor_names(tmp.path("out/model.safetensors")) == tensor_names(tmp.path("ref/model.safetensors")));
  CHECK(read_file(tmp.path("out/model.safetensors")) == read_file(tmp.path("ref/model.safetensors")));
  CHECK(json::parse(read_file(tmp.path("out/config.json"))) == json::parse(read_file(tmp.path("ref/config.json"))));
  CHECK(stats.tensors == m->hf_parameters().size());
  CHECK(stats.weight_bytes == static_cast<std::uint64_t>(m->parameter_count()) * 4);
  CHECK(stats.largest_buffer_bytes == largest_fp32_bytes(*m));
  CHECK(stats.warnings.empty());

  const auto loaded = model::load_hf_model(tmp.path("out"));
  check_same_weights(*loaded, *m, torch::kFloat);
}

TEST_CASE("A bf16 export holds torch's bf16 rounding of the master weights and says bfloat16",
          "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 12);
  const std::string ckpt = step_dir(tmp.path(), 40);
  write_model_checkpoint(ckpt, *m, 2, extra_for(*m));

  hf_export_options options;
  options.dtype = "bf16";
  const hf_export_stats stats = export_hf(ckpt, tmp.path("out"), options);
  model::save_options ref;
  ref.dtype = torch::kBFloat16;
  model::save_hf_model(*m, tmp.path("ref"), ref);

  CHECK(read_file(tmp.path("out/model.safetensors")) == read_file(tmp.path("ref/model.safetensors")));
  const json config = json::parse(read_file(tmp.path("out/config.json")));
  CHECK(config == json::parse(read_file(tmp.path("ref/config.json"))));
  CHECK(config.value("dtype", config.value("torch_dtype", "")) == "bfloat16");
  CHECK(stats.weight_bytes == static_cast<std::uint64_t>(m->parameter_count()) * 2);
  CHECK(stats.largest_buffer_bytes == largest_fp32_bytes(*m));  // the fp32 staging buffer

  const auto loaded = model::load_hf_model(tmp.path("out"));
  check_same_weights(*loaded, *m, torch::kBFloat16);
}

TEST_CASE("A tied GPT-2 exports without lm_head, sharded with an index like save_hf_model", "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_gpt2, 13);
  REQUIRE(m->config().tie_word_embeddings);
  const std::string ckpt = step_dir(tmp.path(), 40);
  // An engine that also saved the tied head: it is left out, as save_hf_model leaves it out.
  const auto wte = m->hf_parameters().front();
  REQUIRE(wte.name == "transformer.wte.weight");
  write_model_checkpoint(ckpt, *m, 3, extra_for(*m), {{"lm_head.weight", wte.tensor}});

  fs::create_directories(tmp.path("out"));
  tmp.write("out/model-00001-of-00099.safetensors", "stale");
  tmp.write("out/model.safetensors", "stale");
  hf_export_options options;
  options.max_shard_bytes = 3000;
  const hf_export_stats stats = export_hf(ckpt, tmp.path("out"), options);
  model::save_options ref;
  ref.max_shard_bytes = 3000;
  model::save_hf_model(*m, tmp.path("ref"), ref);

  const auto files = listing(tmp.path("out"));
  REQUIRE(files == listing(tmp.path("ref")));
  CHECK(std::count(files.begin(), files.end(), "model.safetensors.index.json") == 1);
  CHECK(std::count(files.begin(), files.end(), "model.safetensors") == 0);
  CHECK(std::count(files.begin(), files.end(), "model-00001-of-00099.safetensors") == 0);
  CHECK(stats.files.size() == files.size());
  for (const auto& f : files) {
    INFO(f);
    CHECK(read_file(tmp.path("out/" + f)) == read_file(tmp.path("ref/" + f)));
  }
  const json index = json::parse(read_file(tmp.path("out/model.safetensors.index.json")));
  CHECK(index["metadata"]["total_size"] == stats.weight_bytes);
  CHECK(index["weight_map"].size() == m->hf_parameters().size());
  CHECK_FALSE(index["weight_map"].contains("lm_head.weight"));
  CHECK(stats.largest_buffer_bytes == largest_fp32_bytes(*m));
  for (const auto& f : files) {
    if (f.rfind("model-", 0) == 0) CHECK(fs::file_size(tmp.path("out/" + f)) < 3000 + 4096);
  }

  const auto loaded = model::load_hf_model(tmp.path("out"));
  check_same_weights(*loaded, *m, torch::kFloat);
}

TEST_CASE("Tokenizer files listed in the manifest are copied; a missing one is a warning", "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 14);
  const std::string tok = tmp.write("tok/tokenizer.json", "{\"model\": {}}");
  const std::string tok_config = tmp.write("tok/tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
  const std::string missing = tmp.path("tok/tokenizer.model");
  const std::string ckpt = step_dir(tmp.path(), 40);
  write_model_checkpoint(ckpt, *m, 2, extra_for(*m, {tok, missing, tok_config}));

  const hf_export_stats stats = export_hf(ckpt, tmp.path("out"));
  CHECK(read_file(tmp.path("out/tokenizer.json")) == "{\"model\": {}}");
  CHECK(read_file(tmp.path("out/tokenizer_config.json")) == "{\"bos_token\": \"<s>\"}");
  CHECK_FALSE(fs::exists(tmp.path("out/tokenizer.model")));
  REQUIRE(stats.warnings.size() == 1);
  CHECK_THAT(stats.warnings[0], Catch::Contains(missing) && Catch::Contains("missing"));
  CHECK(stats.files ==
        std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"});
}

TEST_CASE("A checkpoint with a flipped byte is refused naming the file, and nothing is written",
          "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 15);
  const std::string ckpt = step_dir(tmp.path(), 40);
  write_model_checkpoint(ckpt, *m, 3, extra_for(*m));
  const fs::path shard = fs::path(ckpt) / "rank-00001.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 5));
    f.put('\x7f');
  }
  const std::string why = error_of([&] { export_hf(ckpt, tmp.path("out")); });
  CHECK_THAT(why, Catch::Contains("rank-00001.safetensors") && Catch::Contains("checksum mismatch") &&
                      Catch::Contains("refusing to export"));
  CHECK_FALSE(fs::exists(tmp.path("out/config.json")));
  CHECK_FALSE(fs::exists(tmp.path("out/model.safetensors")));
}

TEST_CASE("A checkpoint without model_config, uncommitted, or without weights is refused clearly",
          "[core][ckpt]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 16);
  const std::string no_config = step_dir(tmp.path(), 40);
  write_model_checkpoint(no_config, *m, 2, {{"tokenizer_files", json::array()}});
  CHECK_THAT(error_of([&] { export_hf(no_config, tmp.path("out")); }),
             Catch::Contains(no_config + "/manifest.json") && Catch::Contains("model_config") &&
                 Catch::Contains("causal_lm"));

  const std::string bad_config = step_dir(tmp.path(), 41);
  write_model_checkpoint(bad_config, *m, 2, {{"model_config", {{"model_type", "llama"}}}});
  CHECK_THAT(error_of([&] { export_hf(bad_config, tmp.path("out")); }), Catch::Contains("extra.model_config"));

  const std::string bad_tokenizer = step_dir(tmp.path(), 42);
  write_model_checkpoint(bad_tokenizer, *m, 2, {{"model_config", model::to_hf_json(m->config())},
                                                {"tokenizer_files", "tokenizer.json"}});
  CHECK_THAT(error_of([&] { export_hf(bad_tokenizer, tmp.path("out")); }), Catch::Contains("tokenizer_files"));

  fs::remove(fs::path(no_config) / committed_name);
  CHECK_THAT(error_of([&] { export_hf(no_config, tmp.path("out")); }), Catch::Contains("no COMMITTED"));
  CHECK_THAT(error_of([&] { export_hf(tmp.path("nowhere"), tmp.path("out")); }),
             Catch::Contains("not a checkpoint directory"));

  // The made-up checkpoints of other tests hold no param/ tensors.
  const std::string no_params = step_dir(tmp.path(), 43);
  const float v[2] = {1, 2};
  const rank_report r = write_rank_shard(no_params, 0, {{"moments", "F32", {2}, v, 8, {}}}, rank_state{});
  commit_checkpoint(no_params, 0, 1, {r}, json::object(), extra_for(*m));
  CHECK_THAT(error_of([&] { export_hf(no_params, tmp.path("out")); }), Catch::Contains("no 'param/<name>' tensors"));
  CHECK_FALSE(fs::exists(tmp.path("out")));
}

TEST_CASE("Export options outside fp32/bf16 or a zero shard size are refused", "[core][ckpt]") {
  temp_dir tmp;
  hf_export_options fp16;
  fp16.dtype = "fp16";
  CHECK_THAT(error_of([&] { export_hf(tmp.str(), tmp.path("out"), fp16); }),
             Catch::Contains("'fp16'") && Catch::Contains("fp32 or bf16"));
  hf_export_options zero;
  zero.max_shard_bytes = 0;
  CHECK_THAT(error_of([&] { export_hf(tmp.str(), tmp.path("out"), zero); }), Catch::Contains("max_shard_bytes"));
}

TEST_CASE("bf16 rounding matches torch's for ties, infinities and subnormals; NaN stays NaN", "[core][ckpt]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values{0.0f, -0.0f, 1.0f, -2.5f, 1.00390625f /* tie, even */, 1.01171875f /* tie, odd */,
                            3.14159265f, 1e-40f /* subnormal */, -1e-45f, 3.4e38f /* rounds to inf */,
                            std::numeric_limits<float>::max(), inf, -inf, 65504.0f, 1.0f + 1.0f / 256};
  const auto ours = [&](float f) { return bf16_from_f32(f); };
  const torch::Tensor theirs = torch::from_blob(values.data(), {static_cast<std::int64_t>(values.size())})
                                   .to(torch::kBFloat16)
                                   .contiguous();
  const auto* bits = reinterpret_cast<const std::uint16_t*>(theirs.data_ptr());
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO(values[i]);
    CHECK(ours(values[i]) == bits[i]);
  }
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN()}) {
    const std::uint16_t h = ours(nan);
    CHECK((h & 0x7f80) == 0x7f80);  // exponent all ones
    CHECK((h & 0x007f) != 0);       // and a payload: NaN, not infinity
    CHECK((h >> 15) == (std::signbit(nan) ? 1 : 0));
  }
}

TEST_CASE("cohort-ckpt export writes a loadable directory (exit 0), refuses a bad checkpoint (1) and bad usage (2)",
          "[core][ckpt][tools]") {
  temp_dir tmp;
  const auto m = make_model(tiny_llama, 17);
  const std::string ckpt = step_dir(tmp.path(), 40);
  write_model_checkpoint(ckpt, *m, 2, extra_for(*m, {tmp.path("absent/tokenizer.json")}));

  const tool_result ok =
      run_tool("cohort-ckpt", "export " + ckpt + " --hf " + tmp.path("out") + " --dtype bf16 --max-shard-size 2KB");
  INFO("stdout: " << ok.out << "\nstderr: " << ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("model.safetensors.index.json") && Catch::Contains("model-00001-of-"));
  CHECK_THAT(ok.err, Catch::Contains("warning") && Catch::Contains("absent/tokenizer.json"));
  check_same_weights(*model::load_hf_model(tmp.path("out")), *m, torch::kBFloat16);

  // Each run loads libtorch (about a second here): one run per exit path.
  fs::remove(fs::path(ckpt) / "rank-00000.json");
  const tool_result broken = run_tool("cohort-ckpt", "export " + ckpt + " --hf " + tmp.path("out2"));
  CHECK(broken.code == 1);
  CHECK_THAT(broken.err, Catch::Contains("rank-00000.json") && Catch::Contains("missing"));
  CHECK_FALSE(fs::exists(tmp.path("out2")));

  const tool_result no_out = run_tool("cohort-ckpt", "export " + ckpt);
  CHECK(no_out.code == 2);
  CHECK_THAT(no_out.err, Catch::Contains("--hf") && Catch::Contains("export CKPT --hf OUT"));
  CHECK(run_tool("cohort-ckpt", "export " + ckpt + " --hf " + tmp.path("o") + " --dtype fp16").code == 2);
  CHECK(run_tool("cohort-ckpt", "export " + ckpt + " --hf " + tmp.path("o") + " --max-shard-size 5XB").code == 2);
}

namespace {

// A tiny GPT-2 (Conv1D weights, tied head) saved as the base in `base_dir`, with LoRA adapters
// r 2, alpha 6 on c_attn, c_proj and c_fc, A and B both random: what a LoRA run's checkpoint holds.
model::decoder lora_gpt2(const std::string& base_dir) {
  auto m = make_model(tiny_gpt2, 23);
  model::save_hf_model(*m, base_dir);
  model::lora_config lora;
  lora.r = 2;
  lora.alpha = 6;
  lora.target_modules = {"c_attn", "c_proj", "c_fc"};
  lora.base = base_dir;
  m->add_lora(lora, torch::kFloat);
  torch::NoGradGuard no_grad;
  for (const auto& p : m->lora_parameters()) {
    auto t = p.tensor;
    t.normal_(0.0, 0.3);
  }
  m->eval();
  return m;
}

json lora_extra(const model::decoder_impl& m) {
  auto extra = extra_for(m);
  extra[lora_extra_key] = model::lora_to_json(m.lora());
  return extra;
}

}  // namespace

TEST_CASE("A LoRA checkpoint of GPT-2 exports merged (W + s·(BA)ᵀ in Conv1D's layout) as a model "
          "that computes the adapted model's logits",
          "[core][ckpt][lora]") {
  temp_dir tmp;
  auto m = lora_gpt2(tmp.path("base"));
  const std::string ckpt = step_dir(tmp.path("run"), 40);
  write_tensors_checkpoint(ckpt, m->lora_parameters(), 2, lora_extra(*m));
  // param/ and exp_avg/ of 16 adapters (A and B of c_attn, both c_proj and c_fc in 2 layers) and a
  // step count: no base weight.
  REQUIRE(read_manifest(ckpt).tensors.size() == 2 * 16 + 1);

  const auto stats = export_hf(ckpt, tmp.path("merged"));
  CHECK(stats.files.front() == "config.json");
  CHECK(tensor_names(tmp.path("merged") + "/model.safetensors") == tensor_names(tmp.path("base") + "/model.safetensors"));
  auto merged = model::load_hf_model(tmp.path("merged"));
  const auto ids = torch::randint(40, {2, 9}, torch::kInt64);
  torch::NoGradGuard no_grad;
  const auto expected = m->forward(ids).logits;
  CAPTURE((merged->forward(ids).logits - expected).abs().max().item<double>());
  CHECK(torch::allclose(merged->forward(ids).logits, expected, 1e-5, 1e-5));
  auto base = model::load_hf_model(tmp.path("base"));
  CHECK((base->forward(ids).logits - expected).abs().max().item<double>() > 1e-2);  // the adapters count

  // The base gone: refused, naming it and the adapter-only export.
  fs::remove_all(tmp.path("base"));
  CHECK_THAT(error_of([&] { export_hf(ckpt, tmp.path("merged2")); }),
             Catch::Contains(tmp.path("base")) && Catch::Contains("--peft"));
}

TEST_CASE("A LoRA checkpoint exports its adapters in peft's layout; a whole model's has none to export",
          "[core][ckpt][lora]") {
  temp_dir tmp;
  auto m = lora_gpt2(tmp.path("base"));
  const std::string ckpt = step_dir(tmp.path("run"), 40);
  write_tensors_checkpoint(ckpt, m->lora_parameters(), 3, lora_extra(*m));
  CHECK(is_lora_checkpoint(ckpt));

  const auto stats = export_peft(ckpt, tmp.path("adapter"));
  CHECK(stats.tensors == 16);
  CHECK(listing(tmp.path("adapter")) == std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"});
  const auto config = json::parse(read_file(tmp.path("adapter/adapter_config.json")));
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["task_type"] == "CAUSAL_LM");
  CHECK(config["r"] == 2);
  CHECK(config["lora_alpha"] == 6.0);
  CHECK(config["fan_in_fan_out"] == true);  // GPT-2's Conv1D
  CHECK(config["bias"] == "none");
  CHECK(config["target_modules"] == json::array({"c_attn", "c_proj", "c_fc"}));
  CHECK(config["base_model_name_or_path"] == tmp.path("base"));
  const model::safetensors_reader adapters(tmp.path("adapter/adapter_model.safetensors"));
  CHECK(adapters.tensors().size() == 16);
  for (const auto& p : m->lora_parameters()) {
    const std::string name = "base_model.model." + p.name;
    INFO(name);
    const auto& e = adapters.at(name);
    CHECK(e.shape == p.tensor.sizes().vec());
    std::vector<float> values(static_cast<std::size_t>(p.tensor.numel()));
    adapters.read(e, values.data());
    CHECK(torch::equal(torch::from_blob(values.data(), p.tensor.sizes(), torch::kFloat), p.tensor));
  }
  CHECK(adapters.find("base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight") != nullptr);

  hf_export_options bf16;
  bf16.dtype = "bf16";
  export_peft(ckpt, tmp.path("adapter-bf16"), bf16);
  const model::safetensors_reader rounded(tmp.path("adapter-bf16/adapter_model.safetensors"));
  for (const auto& e : rounded.tensors()) CHECK(e.dtype == "BF16");

  const auto whole = make_model(tiny_llama, 3);
  const std::string whole_ckpt = step_dir(tmp.path("whole"), 40);
  write_model_checkpoint(whole_ckpt, *whole, 1, extra_for(*whole));
  CHECK_FALSE(is_lora_checkpoint(whole_ckpt));
  CHECK_THAT(error_of([&] { export_peft(whole_ckpt, tmp.path("none")); }),
             Catch::Contains("holds a whole model, not LoRA adapters"));
}

TEST_CASE("cohort-ckpt export --peft writes the adapters (exit 0) and refuses --hf with it (2)",
          "[core][ckpt][tools][lora]") {
  temp_dir tmp;
  auto m = lora_gpt2(tmp.path("base"));
  const std::string ckpt = step_dir(tmp.path("run"), 40);
  write_tensors_checkpoint(ckpt, m->lora_parameters(), 1, lora_extra(*m));
  const tool_result ok = run_tool("cohort-ckpt", "export " + ckpt + " --peft " + tmp.path("adapter"));
  INFO("stdout: " << ok.out << "\nstderr: " << ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("adapter_model.safetensors") && Catch::Contains("16 tensors"));
  CHECK(fs::exists(tmp.path("adapter/adapter_config.json")));
  const tool_result both = run_tool("cohort-ckpt", "export " + ckpt + " --peft " + tmp.path("a") + " --hf " + tmp.path("b"));
  CHECK(both.code == 2);
  CHECK_THAT(both.err, Catch::Contains("one of --hf OUT") && Catch::Contains("--peft OUT"));
}
