// The cohort-data subcommands (see commands.hpp).
#include "tools/cohort-data/commands.hpp"

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/data/build/builder.hpp"
#include "core/data/dataset.hpp"
#include "core/data/sampler.hpp"
#include "core/data/verify.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace cohort::tools::data {
namespace po = boost::program_options;
namespace cd = cohort::core::data;
using nlohmann::json;

namespace {

// Parses `a` against `desc` (plus --help and, when `dir` is set, one positional DIR). Returns false
// after printing help.
bool parse(const args& a, po::options_description& desc, po::variables_map& vm, const char* synopsis,
           std::string* dir = nullptr) {
  desc.add_options()("help,h", "show this help");
  po::positional_options_description pos;
  if (dir != nullptr) {
    desc.add_options()("dir", po::value<std::string>(dir), "dataset directory");
    pos.add("dir", 1);
  }
  po::store(po::command_line_parser(a).options(desc).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: cohort-data " << synopsis << "\n\n" << desc << "\n";
    return false;
  }
  po::notify(vm);
  if (dir != nullptr && dir->empty()) throw po::error("the dataset directory DIR is required");
  return true;
}

void require_positive(const po::variables_map& vm, const char* name) {
  const auto v = vm[name].as<std::int64_t>();
  if (v < 1) throw po::error(std::string("--") + name + " must be >= 1, got " + std::to_string(v));
}

cd::batch_geometry geometry_from(const po::variables_map& vm) {
  for (const char* n : {"world-size", "micro-batch", "grad-accum"}) require_positive(vm, n);
  return {vm["world-size"].as<std::int64_t>(), vm["micro-batch"].as<std::int64_t>(),
          vm["grad-accum"].as<std::int64_t>()};
}

void add_geometry(po::options_description& desc) {
  desc.add_options()("world-size", po::value<std::int64_t>()->required(), "number of ranks W")(
      "micro-batch", po::value<std::int64_t>()->required(), "samples per rank per micro-batch B")(
      "grad-accum", po::value<std::int64_t>()->required(), "micro-batches per rank per step G");
}

}  // namespace

int build_command(const args& a) {
  cd::build_options o;
  bool pack = false, pad = false, quiet = false;
  po::options_description desc("build options");
  desc.add_options()("input", po::value(&o.input)->required(), "a .txt/.jsonl file or a directory of them")(
      "tokenizer", po::value(&o.tokenizer_path)->required(),
      "tokenizer.json, tokenizer.model or a model directory")(
      "template", po::value(&o.template_text),
      "SFT template for jsonl, e.g. \"{question}\\n{answer}\"; the last field is the completion (in the "
      "loss)")("field", po::value(&o.field), "pretraining jsonl: the field holding the text")(
      "pairs", po::bool_switch(&o.pairs),
      "reward-model pairs from jsonl: each record's \"chosen\" and \"rejected\" strings (after its "
      "\"prompt\", "
      "when it has one) become two samples, BOS text EOS, cut to --seq-len")(
      "special-tokens", po::value(&o.special_tokens_file),
      "JSON file {\"tokens\": [\"<USER>\", ...]}: tokens added to the tokenizer, matched whole; the manifest "
      "records them and their ids (a job adds them to its model with model.added_tokens: FILE)")(
      "seq-len", po::value(&o.seq_len), "tokens per sample (pretraining and SFT)")(
      "template-source", po::value(&o.template_source),
      "seq2seq: the source (encoder) text of each jsonl record, e.g. \"{question}\"; needs "
      "--template-target")(
      "template-target", po::value(&o.template_target),
      "seq2seq: the target (decoder label) text of each jsonl record, e.g. \"{answer}\"")(
      "source-len", po::value<std::int64_t>(), "seq2seq: source tokens per sample, special tokens included")(
      "target-len", po::value(&o.target_len), "seq2seq: target tokens per sample, special tokens included")(
      "over-long", po::value(&o.over_long),
      "seq2seq: a source or target over its length is cut to it (truncate, the default), left out (skip) "
      "or stops the build naming its line (error); the counts are reported")(
      "pack", po::bool_switch(&pack), "pack records into seq_len blocks (default for pretraining)")(
      "pad", po::bool_switch(&pad), "one record per sample, padded at read time (default for SFT)")(
      "out", po::value(&o.out_dir)->required(), "output directory (new, empty, or a previous dataset)")(
      "threads", po::value(&o.threads), "tokenizer threads (default: all cores)")(
      "shard-tokens", po::value(&o.shard_tokens), "tokens per shard (default 134217728)")(
      "quiet", po::bool_switch(&quiet), "no progress bar");
  po::variables_map vm;
  if (!parse(
          a, desc, vm,
          "build --input PATH --tokenizer FILE [--template T | --field NAME | --pairs] [options] --seq-len N "
          "--out DIR\n"
          "       cohort-data build --input FILE.jsonl --tokenizer FILE --template-source S "
          "--template-target T\n"
          "                         --source-len N --target-len M [--over-long truncate|skip|error] --out "
          "DIR"))
    return 0;
  const bool seq2seq = vm.count("template-source") || vm.count("template-target");
  if (seq2seq) {
    if (vm.count("seq-len")) throw po::error("seq2seq data takes --source-len and --target-len, not --seq-len");
    if (!vm.count("source-len") || !vm.count("target-len"))
      throw po::error("seq2seq data (--template-source/--template-target) needs --source-len and --target-len");
    o.seq_len = vm["source-len"].as<std::int64_t>();
  } else {
    if (!vm.count("seq-len")) throw po::error("the option '--seq-len' is required but missing");
    for (const char* name : {"source-len", "target-len", "over-long"})
      if (vm.count(name))
        throw po::error(std::string("--") + name + " applies to seq2seq data (--template-source and --template-target)");
  }
  if (pack && pad) throw po::error("--pack and --pad exclude each other");
  o.layout = pack ? "pack" : pad ? "pad" : "";
  o.progress = !quiet;
  auto tok = cohort::core::tokenizer::load_tokenizer(o.tokenizer_path);
  const auto r = cd::build_dataset(o, *tok);
  const auto& m = r.result;
  std::fprintf(stderr,
               "cohort-data build: %lld samples, %lld tokens (%lld in the loss) from %lld records into %s in %.1fs "
               "(%.1f MB/s)\n",
               static_cast<long long>(m.samples), static_cast<long long>(m.tokens),
               static_cast<long long>(m.loss_tokens), static_cast<long long>(m.records), o.out_dir.c_str(), r.seconds,
               r.seconds > 0 ? static_cast<double>(r.input_bytes) / 1e6 / r.seconds : 0.0);
  if (m.seq2seq) {
    const auto& t = *m.seq2seq;
    std::fprintf(stderr,
                 "cohort-data build: seq2seq, %lld target tokens; over-long (%s): %lld sources cut to --source-len "
                 "%lld (%lld tokens), %lld targets cut to --target-len %lld (%lld tokens), %lld records skipped\n",
                 static_cast<long long>(t.target_tokens), t.over_long.c_str(),
                 static_cast<long long>(m.truncated_samples), static_cast<long long>(m.seq_len),
                 static_cast<long long>(m.truncated_tokens), static_cast<long long>(t.truncated_samples),
                 static_cast<long long>(t.target_len), static_cast<long long>(t.truncated_tokens),
                 static_cast<long long>(t.skipped_samples));
  } else if (m.truncated_samples > 0) {
    std::fprintf(stderr, "cohort-data build: %lld samples longer than --seq-len %lld were truncated (%lld tokens cut)\n",
                 static_cast<long long>(m.truncated_samples), static_cast<long long>(m.seq_len),
                 static_cast<long long>(m.truncated_tokens));
  }
  return 0;
}

int inspect_command(const args& a) {
  std::string dir;
  po::options_description desc("inspect options");
  po::variables_map vm;
  if (!parse(a, desc, vm, "inspect DIR", &dir)) return 0;
  const cd::dataset ds(dir);
  const auto& m = ds.info();
  std::uint64_t bytes = 0;
  for (const auto& s : m.shards)
    for (const auto& f : cd::shard_files(s)) bytes += f.second->bytes;
  json out{{"samples", m.samples},
                 {"tokens", m.tokens},
                 {"loss_tokens", m.loss_tokens},
                 {"seq_len", m.seq_len},
                 {"vocab_size", m.vocab_size},
                 {"token_dtype", cd::token_dtype_name(m.token_bytes)},
                 {"kind", m.kind},
                 {"layout", m.layout},
                 {"has_loss_mask", m.has_loss_mask},
                 {"records", m.records},
                 {"truncated_samples", m.truncated_samples},
                 {"truncated_tokens", m.truncated_tokens},
                 {"tokenizer", {{"identity", m.tokenizer_identity}, {"path", m.tokenizer_path}}},
                 {"special_tokens", m.special_tokens},
                 {"special_token_ids", m.special_token_ids},
                 {"eos_id", m.eos_id},
                 {"pad_id", m.pad_id},
                 {"bos_id", m.bos_id ? json(*m.bos_id) : json(nullptr)},
                 {"shards", m.shards.size()},
                 {"bytes", bytes},
                 {"format_version", m.version}};
  if (m.seq2seq) {
    const auto& t = *m.seq2seq;
    out["source_len"] = m.seq_len;
    out["target_len"] = t.target_len;
    out["target_tokens"] = t.target_tokens;
    out["over_long"] = t.over_long;
    out["truncated_target_samples"] = t.truncated_samples;
    out["truncated_target_tokens"] = t.truncated_tokens;
    out["skipped_samples"] = t.skipped_samples;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

int plan_command(const args& a) {
  std::string dir;
  std::int64_t epochs = 1;
  po::options_description desc("plan options");
  add_geometry(desc);
  desc.add_options()("epochs", po::value(&epochs), "passes over the dataset (default 1)");
  po::variables_map vm;
  if (!parse(a, desc, vm, "plan DIR --world-size W --micro-batch B --grad-accum G [--epochs E]", &dir)) return 0;
  const auto g = geometry_from(vm);
  if (epochs < 1) throw po::error("--epochs must be >= 1, got " + std::to_string(epochs));
  const cd::dataset ds(dir);
  const cd::sampler s(ds.size(), g.global_batch(), 0);
  const json out{{"samples", ds.size()},
                 {"global_batch", g.global_batch()},
                 {"world_size", g.world_size},
                 {"micro_batch", g.micro_batch},
                 {"grad_accum", g.grad_accum},
                 {"epochs", epochs},
                 {"steps_per_epoch", s.steps_per_epoch()},
                 {"total_steps", s.steps_per_epoch() * epochs},
                 {"samples_per_rank_per_step", g.per_rank()},
                 {"dropped_per_epoch", s.dropped_per_epoch()},
                 {"tokens_per_step", g.global_batch() * (ds.seq_len() + (ds.is_seq2seq() ? ds.target_len() : 0))},
                 {"note", "the last partial global batch of each epoch (" + std::to_string(s.dropped_per_epoch()) +
                              " samples) is dropped; steps are counted on the whole dataset, not per rank"}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

int batches_command(const args& a) {
  std::string dir;
  std::int64_t rank = 0, start = 0, steps = 1;
  std::uint64_t seed = 0;
  po::options_description desc("batches options");
  add_geometry(desc);
  desc.add_options()("rank", po::value(&rank)->required(), "this rank, 0 <= R < W")(
      "seed", po::value(&seed)->required(), "shuffle seed")("start-step", po::value(&start), "first global step (default 0)")(
      "steps", po::value(&steps), "number of steps to print (default 1)");
  po::variables_map vm;
  if (!parse(a, desc, vm,
             "batches DIR --world-size W --rank R --micro-batch B --grad-accum G --seed S --start-step K --steps N",
             &dir))
    return 0;
  const auto g = geometry_from(vm);
  if (rank < 0 || rank >= g.world_size)
    throw po::error("--rank " + std::to_string(rank) + " is outside [0, " + std::to_string(g.world_size) + ")");
  if (start < 0) throw po::error("--start-step must be >= 0");
  if (steps < 0) throw po::error("--steps must be >= 0");
  const cd::dataset ds(dir);
  const cd::sampler s(ds.size(), g.global_batch(), seed);
  for (std::int64_t k = start; k < start + steps; ++k) {
    const json line{{"step", k}, {"epoch", k / s.steps_per_epoch()}, {"samples", s.rank_samples(k, g, rank)}};
    std::cout << line.dump() << "\n";
  }
  return 0;
}

int verify_command(const args& a) {
  std::string dir;
  po::options_description desc("verify options");
  po::variables_map vm;
  if (!parse(a, desc, vm, "verify DIR", &dir)) return 0;
  const auto problems = cd::verify_dataset(dir);
  if (problems.empty()) {
    const auto m = cd::read_manifest(dir);
    std::cout << json{{"ok", true}, {"shards", m.shards.size()}, {"samples", m.samples}}.dump() << "\n";
    return 0;
  }
  for (const auto& p : problems) std::fprintf(stderr, "cohort-data verify: %s: %s\n", p.file.c_str(), p.message.c_str());
  json bad = json::array();
  for (const auto& p : problems) bad.push_back({{"file", p.file}, {"problem", p.message}});
  std::cout << json{{"ok", false}, {"problems", bad}}.dump() << "\n";
  return 1;
}

}  // namespace cohort::tools::data
