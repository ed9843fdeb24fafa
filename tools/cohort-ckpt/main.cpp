// cohort-ckpt: list a run's checkpoints and verify one. (Export to Hugging Face needs the
// engine's parameter layout and is not here yet.)
// Exit codes: 0 fine, 1 a checkpoint has a problem or an operation failed, 2 usage.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"

namespace po = boost::program_options;
namespace ckpt = cohort::core::ckpt;

namespace {

constexpr const char* usage_text =
    "usage: cohort-ckpt ls RUN [--score ATTR]   list RUN/checkpoints: step, size, state, score\n"
    "       cohort-ckpt verify CKPT             check COMMITTED, manifest and every file's checksum\n";

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

int run_ls(const std::string& run, const std::string& score) {
  const auto all = ckpt::scan_checkpoints(run);
  if (all.empty()) {
    std::cout << "no checkpoints under " << ckpt::checkpoints_dir(run) << "\n";
    return 0;
  }
  std::printf("%-14s %12s  %-10s %s\n", "step", "size", "state", score.empty() ? "metrics" : score.c_str());
  for (const auto& c : all) {
    std::string metric = "-";
    std::string state = c.committed ? "committed" : "incomplete";
    if (c.committed) {
      try {
        const ckpt::manifest m = ckpt::read_manifest(c.path);
        if (score.empty()) {
          metric = m.metrics.dump();
        } else if (auto it = m.metrics.find(score); it != m.metrics.end()) {
          metric = it->dump();
        }
      } catch (const ckpt::ckpt_error& e) {
        state = "bad";
        metric = e.what();
      }
    }
    std::printf("%-14llu %12s  %-10s %s\n", static_cast<unsigned long long>(c.step), human_bytes(c.bytes).c_str(),
                state.c_str(), metric.c_str());
  }
  return 0;
}

int run_verify(const std::string& dir) {
  const ckpt::verify_result v = ckpt::verify_checkpoint(dir);
  if (v.ok()) {
    std::cout << dir << ": OK (step " << v.manifest_read->step << ", world size " << v.manifest_read->world_size
              << ", " << v.manifest_read->files.size() << " files verified)\n";
    return 0;
  }
  for (const auto& p : v.problems) std::cerr << "error: " << p << "\n";
  std::cerr << dir << ": INVALID (" << v.problems.size() << " problem" << (v.problems.size() == 1 ? "" : "s") << ")\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("options");
  desc.add_options()("help,h", "print this help")("score", po::value<std::string>()->default_value(""),
                                                    "ls: the metric to show")(
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
  if (args.size() != 2 || (args[0] != "ls" && args[0] != "verify")) {
    std::cerr << (args.empty() ? std::string("error: no command") : "error: expected a command and one path")
              << "\n" << usage_text;
    return 2;
  }
  try {
    if (args[0] == "ls") return run_ls(args[1], vm["score"].as<std::string>());
    return run_verify(args[1]);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
