// cohort-ckpt: list a run's checkpoints, verify one, and export one's model to a Hugging Face
// directory (streamed tensor by tensor); runs and checkpoints on disk or in S3.
// Exit codes: 0 fine, 1 a checkpoint has a problem or an operation failed, 2 usage.
#include <boost/program_options.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/s3_checkpoints.hpp"

namespace po = boost::program_options;
namespace ckpt = cohort::core::ckpt;

namespace {

constexpr const char* usage_text =
    "usage: cohort-ckpt ls RUN [--score ATTR]   list RUN/checkpoints: step, size, state, score\n"
    "       cohort-ckpt verify CKPT             check COMMITTED, manifest, every file's checksum and\n"
    "                                           each rank's slices against its file's own header\n"
    "       cohort-ckpt export CKPT --hf OUT [--dtype fp32|bf16] [--max-shard-size BYTES]\n"
    "                                           verify CKPT, then write its model to OUT as a Hugging\n"
    "                                           Face directory (config.json, safetensors, tokenizer);\n"
    "                                           shards above BYTES (default 5GB; units KB MB GB KiB\n"
    "                                           MiB GiB) with model.safetensors.index.json; for LoRA\n"
    "                                           adapters the base with them merged in\n"
    "       cohort-ckpt export CKPT --peft OUT [--dtype fp32|bf16]\n"
    "                                           verify CKPT, then write its LoRA adapters to OUT as peft\n"
    "                                           saves them (adapter_config.json, adapter_model.safetensors)\n"
    "RUN and CKPT may be in S3: s3://BUCKET/PREFIX/NAME, s3://BUCKET/PREFIX/NAME/checkpoints/step-N\n"
    "(a checkpoint is downloaded to a temporary directory and checked there). Credentials and region\n"
    "from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE and AWS_REGION; --endpoint URL (else\n"
    "AWS_ENDPOINT_URL) for an S3-compatible server.\n";

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// An S3 run or checkpoint named on the command line, with its client.
struct s3_target {
  std::unique_ptr<cohort::core::storage::s3_client> client;
  ckpt::s3_run run;
  std::optional<std::uint64_t> step;  // set for a checkpoint URL
};

s3_target open_s3(const std::string& url, const std::string& endpoint, bool checkpoint) {
  namespace storage = cohort::core::storage;
  s3_target t;
  t.client = std::make_unique<storage::s3_client>(storage::s3_config_from_environment(endpoint));
  auto parsed = storage::parse_s3_url(url, checkpoint ? "CKPT" : "RUN");
  if (checkpoint) {
    const auto cut = parsed.prefix.rfind("/checkpoints/");
    if (cut != std::string::npos) t.step = ckpt::parse_step_dir_name(parsed.prefix.substr(cut + 13));
    if (!t.step)
      throw std::invalid_argument("CKPT: \"" + url + "\" does not name a checkpoint (s3://BUCKET/PREFIX/checkpoints/step-N)");
    parsed.prefix = parsed.prefix.substr(0, cut);
  }
  t.run = {t.client.get(), parsed};
  return t;
}

// A temporary directory, removed with what it holds when the command ends.
class scratch_dir {
 public:
  scratch_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cohort-ckpt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory");
    path_ = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int run_ls(const std::string& run, const std::string& score, const std::string& endpoint) {
  std::optional<s3_target> s3;
  if (cohort::core::storage::is_s3_url(run)) s3 = open_s3(run, endpoint, false);
  const auto all = s3 ? ckpt::scan_checkpoints_s3(s3->run) : ckpt::scan_checkpoints(run);
  if (all.empty()) {
    std::cout << "no checkpoints under " << (s3 ? s3->run.url.text() + "/checkpoints" : ckpt::checkpoints_dir(run)) << "\n";
    return 0;
  }
  std::printf("%-14s %12s  %-10s %s\n", "step", "size", "state", score.empty() ? "metrics" : score.c_str());
  for (const auto& c : all) {
    std::string metric = "-";
    std::string state = c.committed ? "committed" : "incomplete";
    if (c.committed) {
      try {
        std::optional<scratch_dir> copy;
        std::string dir = c.path;
        if (s3) {  // the manifest and COMMITTED only, checked as on disk
          copy.emplace();
          dir = copy->path();
          const std::string prefix = s3->run.url.key("checkpoints/" + ckpt::step_dir_name(c.step)) + "/";
          for (const char* name : {ckpt::manifest_name, ckpt::committed_name})
            s3->client->get_to_file(s3->run.url.bucket, prefix + name, dir + "/" + name);
        }
        const ckpt::manifest m = ckpt::read_manifest(dir);
        if (score.empty()) {
          metric = m.metrics.dump();
        } else if (auto it = m.metrics.find(score); it != m.metrics.end()) {
          metric = it->dump();
        }
      } catch (const std::runtime_error& e) {  // ckpt_error, or s3_error reading it
        state = "bad";
        metric = e.what();
      }
    }
    std::printf("%-14llu %12s  %-10s %s\n", static_cast<unsigned long long>(c.step), human_bytes(c.bytes).c_str(),
                state.c_str(), metric.c_str());
  }
  return 0;
}

// The local directory of CKPT: itself, or its verified-on-arrival copy from S3 in `scratch`.
std::string local_checkpoint(const std::string& ckpt_path, const std::string& endpoint, std::optional<scratch_dir>& scratch) {
  if (!cohort::core::storage::is_s3_url(ckpt_path)) return ckpt_path;
  const auto t = open_s3(ckpt_path, endpoint, true);
  scratch.emplace();
  const std::string dir = ckpt::step_dir(scratch->path(), *t.step);
  ckpt::download_checkpoint_s3(t.run, *t.step, dir);
  return dir;
}

int run_verify(const std::string& name, const std::string& endpoint) {
  std::optional<scratch_dir> scratch;
  const std::string dir = local_checkpoint(name, endpoint, scratch);
  const ckpt::verify_result v = ckpt::verify_checkpoint(dir);
  if (v.ok()) {
    std::cout << name << ": OK (step " << v.manifest_read->step << ", world size " << v.manifest_read->world_size
              << ", " << v.manifest_read->files.size() << " files verified)\n";
    return 0;
  }
  for (const auto& p : v.problems) std::cerr << "error: " << p << "\n";
  std::cerr << name << ": INVALID (" << v.problems.size() << " problem" << (v.problems.size() == 1 ? "" : "s") << ")\n";
  return 1;
}

// "5000000000", "5GB", "500MiB" -> bytes; nullopt for anything else or zero.
std::optional<std::uint64_t> parse_bytes(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  const std::uint64_t n = std::stoull(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  const std::pair<const char*, std::uint64_t> units[] = {
      {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000'000}, {"GB", 1000'000'000},
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
  for (const auto& [name, scale] : units) {
    if (unit == name && n > 0 && n <= UINT64_MAX / scale) return n * scale;
  }
  return std::nullopt;
}

int run_export(const std::string& name, const std::string& out, const ckpt::hf_export_options& options,
               const std::string& endpoint, bool peft) {
  std::optional<scratch_dir> scratch;
  const std::string dir = local_checkpoint(name, endpoint, scratch);
  const ckpt::hf_export_stats stats = peft ? ckpt::export_peft(dir, out, options) : ckpt::export_hf(dir, out, options);
  for (const auto& w : stats.warnings) std::cerr << "warning: " << w << "\n";
  std::cout << "exported " << name << " to " << out << " (" << options.dtype << "): " << stats.tensors
            << " tensors, " << human_bytes(stats.weight_bytes) << " of weights, largest buffer "
            << human_bytes(stats.largest_buffer_bytes) << "\n";
  for (const auto& f : stats.files) std::cout << "  " << f << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("options");
  desc.add_options()("help,h", "print this help")("score", po::value<std::string>()->default_value(""),
                                                    "ls: the metric to show")(
      "hf", po::value<std::string>(), "export: the output directory")(
      "peft", po::value<std::string>(), "export: the output directory of LoRA adapters in peft's layout")(
      "dtype", po::value<std::string>()->default_value("fp32"), "export: fp32 or bf16")(
      "max-shard-size", po::value<std::string>()->default_value("5GB"), "export: bytes per safetensors file")(
      "endpoint", po::value<std::string>()->default_value(""), "an S3-compatible server for s3:// paths")(
      "args", po::value<std::vector<std::string>>()->default_value({}, ""), "command and path");
  po::positional_options_description pos;
  pos.add("args", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << "\n" << usage_text;
    return 2;
  }
  const auto args = vm["args"].as<std::vector<std::string>>();
  if (vm.count("help")) {
    std::cout << usage_text;
    return 0;
  }
  if (args.size() != 2 || (args[0] != "ls" && args[0] != "verify" && args[0] != "export")) {
    std::cerr << (args.empty() ? std::string("error: no command") : "error: expected a command and one path")
              << "\n" << usage_text;
    return 2;
  }
  const bool export_options = vm.count("hf") || vm.count("peft") || !vm["dtype"].defaulted() ||
                              !vm["max-shard-size"].defaulted();
  if (args[0] != "export" && export_options) {
    std::cerr << "error: --hf, --peft, --dtype and --max-shard-size belong to export\n" << usage_text;
    return 2;
  }
  ckpt::hf_export_options options;
  const bool peft = vm.count("peft") > 0;
  const std::string out = peft ? vm["peft"].as<std::string>() : vm.count("hf") ? vm["hf"].as<std::string>() : "";
  if (args[0] == "export") {
    if (out.empty() || (peft && vm.count("hf"))) {
      std::cerr << "error: export needs one of --hf OUT (a Hugging Face model directory) or --peft OUT "
                   "(LoRA adapters), the directory to write\n" << usage_text;
      return 2;
    }
    options.dtype = vm["dtype"].as<std::string>();
    if (options.dtype != "fp32" && options.dtype != "bf16") {
      std::cerr << "error: --dtype '" << options.dtype << "' is not supported (use fp32 or bf16)\n";
      return 2;
    }
    const auto max_shard = parse_bytes(vm["max-shard-size"].as<std::string>());
    if (!max_shard) {
      std::cerr << "error: --max-shard-size '" << vm["max-shard-size"].as<std::string>()
                << "' is not a positive size (e.g. 5000000000, 5GB, 500MiB)\n";
      return 2;
    }
    options.max_shard_bytes = *max_shard;
  }
  try {
    const std::string endpoint = vm["endpoint"].as<std::string>();
    if (args[0] == "ls") return run_ls(args[1], vm["score"].as<std::string>(), endpoint);
    if (args[0] == "export") return run_export(args[1], out, options, endpoint, peft);
    return run_verify(args[1], endpoint);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
