// The checks of job_preflight.hpp.
#include "core/train/job_preflight.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "config/s3_url.hpp"
#include "core/data/dataset.hpp"
#include "core/data/format.hpp"
#include "core/data/s3_shard_source.hpp"
#include "core/data/verify.hpp"
#include "core/model/hf_files.hpp"
#include "core/model/model_config.hpp"
#include "core/train/vocab_plan.hpp"

#include <nlohmann/json.hpp>

namespace cohort::core::train {

namespace {

// causal_lm trains decoder-only models: pretrain and sft data sets, never seq2seq ones.
void require_decoder_data(const data::manifest& m, const std::string& dir, const char* field) {
  if (m.kind == "pairs")
    throw config::spec_error(
        field, "\"" + dir +
                   "\" is a pairs data set (chosen and rejected texts, built with "
                   "--pairs), which trains a reward model: set workload \"reward_model\", or give "
                   "causal_lm a pretrain or sft data set (`cohort-data build --field` or `--template`)");
  if (m.kind == "seq2seq")
    throw config::spec_error(field, "\"" + dir + "\" is a seq2seq data set (source and target ids, for encoder-"
                                    "decoder models such as T5); causal_lm trains decoder-only models on pretrain "
                                    "or sft data sets (`cohort-data build --field` or `--template`)");
}

// A T5 trains on seq2seq data sets only.
void require_seq2seq_data(const data::manifest& m, const std::string& dir, const char* field) {
  if (m.kind != "seq2seq")
    throw config::spec_error(field, "\"" + dir + "\" is a " + m.kind + " data set; model.hf_dir is a T5 (an "
                                    "encoder-decoder), which trains on seq2seq data sets (`cohort-data build "
                                    "--template-source ... --template-target ...`)");
}

// A reward model trains on pairs data sets only.
void require_pairs_data(const data::manifest& m, const std::string& dir, const char* field) {
  if (m.kind != "pairs")
    throw config::spec_error(field,
                             "\"" + dir + "\" is a " + m.kind +
                                 " data set; workload \"reward_model\" "
                                 "trains on pairs data sets (`cohort-data build --pairs` from jsonl records "
                                 "with \"chosen\" and \"rejected\")");
}

void require_data_kind(const config::job_spec& spec, const data::manifest& m, const std::string& dir,
                       const char* field) {
  if (spec.workload == config::workload_kind::reward_model)
    require_pairs_data(m, dir, field);
  else if (is_t5_job(spec))
    require_seq2seq_data(m, dir, field);
  else
    require_decoder_data(m, dir, field);
}

// What a T5 job cannot take, refused by field.
void check_t5_fields(const config::job_spec& spec) {
  if (spec.model.hf_dir.empty())
    throw config::spec_error("model.config", "is a T5 config; a T5 job fine-tunes a Hugging Face directory: "
                                             "give {\"hf_dir\": DIR} (T5 from init_seed is not supported)");
  if (spec.model.lora.enabled)
    throw config::spec_error("model.lora", "LoRA adapts decoder-only models; model.hf_dir is a T5, which "
                                           "trains whole (remove model.lora)");
  if (spec.train.path == config::compute_path::fused)
    throw config::spec_error("train.compute_path", "\"fused\" is the decoder's fused kernels; a T5 runs the "
                                                   "plain path (use \"automatic\" or \"plain\")");
  if (spec.train.activation_checkpointing)
    throw config::spec_error("train.activation_checkpointing",
                             "is not supported for a T5 (model.hf_dir): set it to false");
}

}  // namespace

bool is_t5_job(const config::job_spec& spec) {
  if (spec.workload != config::workload_kind::causal_lm) return false;
  const auto& m = spec.model;
  nlohmann::json config;
  if (!m.inline_config_json.empty()) {
    config = nlohmann::json::parse(m.inline_config_json, nullptr, /*allow_exceptions=*/false);
  } else {
    try {
      config = !m.hf_dir.empty() ? model::read_hf_config_json(m.hf_dir, spec.run.s3_endpoint)
                                 : model::read_config_json(m.config_file);
    } catch (const std::exception&) {
      return false;  // not readable here: the model's own loading tells
    }
  }
  return config.is_object() && config.value("model_type", std::string()) == "t5";
}

void check_data_set(const config::job_spec& spec) {
  if (!config::trains_model(spec.workload)) return;
  if (is_t5_job(spec)) check_t5_fields(spec);
  if (spec.data.train.empty()) return;
  if (config::is_s3_url(spec.data.train)) return;  // the workers read it from S3 and tell
  const std::string& dir = spec.data.train;
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(status)) return;  // not visible here: the workers will tell
  const std::string allowed = "; data.train must be a directory written by `cohort-data build`";
  if (!std::filesystem::is_directory(status))
    throw config::spec_error("data.train", "\"" + dir + "\" is not a directory" + allowed);
  data::manifest m;
  try {
    m = data::read_manifest(dir);
  } catch (const data::data_error& e) {
    throw config::spec_error("data.train", e.what() + allowed);
  }
  require_data_kind(spec, m, dir, "data.train");
  if (!spec.model.added_tokens.empty() && std::filesystem::exists(spec.model.added_tokens, ec))
    check_added_tokens(spec, m, dir);
  const std::int64_t batch = config::global_batch(spec);
  const bool pairs = m.kind == "pairs";  // a reward model's batch counts pairs
  const std::int64_t items = pairs ? m.samples / 2 : m.samples;
  if (items < batch)
    throw config::spec_error("data.train", "\"" + dir + "\" holds " + std::to_string(items) +
                                               (pairs ? " pairs" : " samples") +
                                               ", fewer than one global batch of train.micro_batch_size × "
                                               "train.grad_accum × scaling.num_workers = " +
                                               std::to_string(spec.train.micro_batch_size) + " × " +
                                               std::to_string(spec.train.grad_accum) + " × " +
                                               std::to_string(spec.scaling.num_workers) + " = " +
                                               std::to_string(batch) + "; use a smaller batch or more data");
}

config::job_spec load_runnable_spec(const std::string& path) {
  auto spec = config::load_job_spec(path);
  config::check_runnable(spec);
  check_data_set(spec);
  return spec;
}

void verify_data_checksums(const std::string& dir) {
  data::verify_checksums(dir, static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));
}

std::shared_ptr<const data::dataset> open_train_data(const config::job_spec& spec, int rank) {
  std::string cache = spec.data.cache_dir;
  if (cache.empty() && config::is_s3_url(spec.data.train)) {  // one cache per data set
    const auto url = config::parse_s3_url(spec.data.train, "data.train");
    cache = (std::filesystem::temp_directory_path() / "cohort-data-cache" / url.bucket / url.prefix).string();
  }
  return data::open_dataset(spec.data.train, spec.run.s3_endpoint, cache + "/rank-" + std::to_string(rank),
                            spec.data.cache_bytes);
}

void verify_data_files(const config::job_spec& spec) {
  if (!config::trains_model(spec.workload)) return;
  // A data set in S3 is opened by the engine, which checks each shard as it fetches it.
  if (!spec.data.train.empty() && !config::is_s3_url(spec.data.train)) {
    data::dataset train(spec.data.train);  // names a missing shard file
    require_data_kind(spec, train.info(), spec.data.train, "data.train");
    if (spec.data.verify) verify_data_checksums(spec.data.train);
  }
  if (!spec.data.eval.empty()) {
    try {
      data::dataset eval(spec.data.eval);
      require_data_kind(spec, eval.info(), spec.data.eval, "data.eval");
      if (spec.data.verify) verify_data_checksums(spec.data.eval);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("data.eval: ") + e.what());
    }
  }
}

}  // namespace cohort::core::train
