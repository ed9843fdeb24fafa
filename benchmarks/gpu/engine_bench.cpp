// engine_bench: one rank of cohort's training engine (core/train causal_lm_engine) on a GPU, as a
// job's worker runs it — NCCL group through a file store, ZeRO stage, bf16 compute with fp32
// master weights — on random tokens, timing the steps after a warmup. Start one process per rank
// with the same --store directory; each prints one JSON line (tokens/s of the whole group, MFU,
// this rank's peak GPU memory and peak of gathered ZeRO-3 weights). scripts/gpu-bench runs it
// beside benchmarks/gpu/torch_fsdp.py, with and without --checkpointing (train.activation_
// checkpointing: layers recomputed in the backward; without it ZeRO-3 keeps each layer's
// activations and gathers its weights again for its backward, as FSDP2 does).
//
//   engine_bench --config benchmarks/gpu/tinyllama-1.1b.json --rank R --world 2 --store DIR
//                [--batch 4] [--seq 2048] [--steps 10] [--warmup 3] [--stage 3] [--precision bf16]
//                [--checkpointing]
#include "core/comm/file_store.hpp"
#include "core/comm/process_group.hpp"
#include "core/data/shard_writer.hpp"
#include "core/model/model_config.hpp"
#include "core/train/causal_lm_engine.hpp"
#include "core/train/mfu.hpp"

#include <boost/program_options.hpp>
#include <c10/cuda/CUDACachingAllocator.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace po = boost::program_options;
using namespace cohort;

namespace {

struct bench_options {
  std::string config;
  std::string store;
  int rank = 0;
  int world = 2;
  int batch = 4;
  int seq = 2048;
  int steps = 10;
  int warmup = 3;
  int stage = 3;
  std::string precision = "bf16";
  bool checkpointing = false;
  int timeout_s = 600;
};

// Random tokens in pretraining layout (one packed sample = seq ids), enough for every step; the
// same on every rank (fixed seed), written under `dir`.
std::string write_random_tokens(const std::string& dir, std::int64_t vocab, std::int64_t samples,
                                std::int64_t seq) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = vocab;
  o.token_bytes = core::data::token_bytes_for_vocab(vocab);
  core::data::shard_writer w(dir, o);
  std::mt19937_64 generator(1234);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(seq));
  for (std::int64_t s = 0; s < samples; ++s) {
    for (auto& i : ids) i = id(generator);
    w.append(ids.data(), seq, nullptr);
  }
  core::data::manifest m;
  m.kind = "pretrain";
  m.layout = "pack";
  m.seq_len = seq;
  m.vocab_size = vocab;
  w.finish(m);
  return dir;
}

double peak_gpu_gib(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto aggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1024.0 * 1024.0 * 1024.0);
}

int run(const bench_options& o) {
  const auto model_config = core::model::read_config(o.config);
  config::job_spec spec;
  spec.name = "engine-bench";
  spec.model.config_file = o.config;
  spec.model.init_seed = 1;
  spec.scaling.num_workers = o.world;
  spec.scaling.use_gpu = true;
  spec.train.seq_len = o.seq;
  spec.train.micro_batch_size = o.batch;
  spec.train.max_steps = o.warmup + o.steps;
  spec.train.lr = 1e-4;
  spec.train.weight_decay = 0.01;
  spec.train.dtype = o.precision == "bf16" ? config::precision::bf16 : config::precision::fp32;
  spec.zero.stage = o.stage;
  spec.train.activation_checkpointing = o.checkpointing;
  const std::int64_t samples = std::int64_t{o.batch} * o.world * (o.warmup + o.steps);
  spec.data.train = write_random_tokens(o.store + "/data-rank" + std::to_string(o.rank),
                                        model_config.vocab_size, samples, o.seq);

  const int device = core::train::causal_lm_engine::cuda_device_for(o.rank);
  if (device < 0) throw std::runtime_error("no CUDA device visible");
  core::comm::group_options g;
  g.backend = core::comm::backend_kind::nccl;
  g.rank = o.rank;
  g.world_size = o.world;
  g.rendezvous = std::make_shared<core::comm::file_store>(o.store + "/store");
  g.key_prefix = "engine-bench/";
  g.timeout = std::chrono::seconds(o.timeout_s);
  g.cuda_device = device;
  auto group = core::comm::make_process_group(g);

  const auto built = std::chrono::steady_clock::now();
  core::train::causal_lm_engine engine(spec, *group);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count();
  core::train::step_result last;
  for (int i = 0; i < o.warmup; ++i) last = engine.train_step();
  double seconds = 0, loss_first = last.loss;
  std::int64_t tokens = 0;
  for (int i = 0; i < o.steps; ++i) {
    last = engine.train_step();  // ends with host reads: its seconds cover the GPU work
    seconds += last.seconds;
    tokens += last.tokens;
  }
  if (!std::isfinite(last.loss)) throw std::runtime_error("loss is not finite after the timed steps");
  const double tokens_per_s = static_cast<double>(tokens) / seconds;
  nlohmann::json result = {
      {"impl", "cohort-zero" + std::to_string(o.stage) + (o.checkpointing ? "-ac" : "")},
      {"activation_checkpointing", o.checkpointing},
      {"config", o.config},
      {"device", core::train::cuda_device_name(device)},
      {"rank", o.rank},
      {"world", o.world},
      {"params", engine.parameter_count()},
      {"layers", model_config.num_layers},
      {"hidden", model_config.hidden_size},
      {"batch", o.batch},
      {"seq", o.seq},
      {"steps", o.steps},
      {"step_ms", seconds / o.steps * 1e3},
      {"tokens_per_s", tokens_per_s},
      {"mfu", core::train::mfu(tokens_per_s, engine.flops_per_token(), engine.peak_flops(), o.world)},
      {"peak_mem_gib", peak_gpu_gib(device)},
      {"gathered_peak_gib", static_cast<double>(engine.gathered_peak_bytes()) / (1024.0 * 1024.0 * 1024.0)},
      {"build_s", build_s},
      {"loss_after_warmup", loss_first},
      {"loss", last.loss},
  };
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench_options o;
  po::options_description desc("engine_bench options");
  desc.add_options()("help", "show this help")(
      "config", po::value(&o.config)->required(), "Hugging Face style config.json of the model")(
      "store", po::value(&o.store)->required(), "directory shared by the ranks (store and data)")(
      "rank", po::value(&o.rank)->required(), "this process's rank")(
      "world", po::value(&o.world)->default_value(o.world), "number of ranks (one GPU each)")(
      "batch", po::value(&o.batch)->default_value(o.batch), "micro-batch size per rank")(
      "seq", po::value(&o.seq)->default_value(o.seq), "sequence length")(
      "steps", po::value(&o.steps)->default_value(o.steps), "timed steps")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")(
      "stage", po::value(&o.stage)->default_value(o.stage), "ZeRO stage (0..3)")(
      "precision", po::value(&o.precision)->default_value(o.precision), "bf16 or fp32")(
      "checkpointing", po::bool_switch(&o.checkpointing),
      "train.activation_checkpointing: recompute each layer in the backward")(
      "timeout", po::value(&o.timeout_s)->default_value(o.timeout_s), "collective timeout, seconds");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (o.batch < 1 || o.seq < 2 || o.steps < 1 || o.warmup < 1 || o.world < 1 || o.rank < 0 ||
        o.rank >= o.world)
      throw std::invalid_argument("--batch, --steps, --warmup and --world must be >= 1, --seq >= 2, "
                                  "0 <= --rank < --world");
    if (o.precision != "bf16" && o.precision != "fp32")
      throw std::invalid_argument("--precision '" + o.precision + "' is not known (allowed: bf16, fp32)");
    std::filesystem::create_directories(o.store);
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "engine_bench rank " << o.rank << ": " << e.what() << "\n";
    return 1;
  }
}
