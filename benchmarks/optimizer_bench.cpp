// optimizer_bench: the host AdamW of optimizer offload (core/model adamw_step_host, one pass with
// clipping and the bf16 copy) beside the same update as torch ops (adamw_step + clip + copy_),
// on one rank's shard, in ns per element and GB/s of memory traffic, and beside what the machine's
// memory gives the same threads: STREAM's copy (c = a) and triad (a = b + s·c) kernels over
// arrays of the shard's size, split over threads as the update is. Run one per rank at once (with
// OMP_NUM_THREADS = cores / ranks) to see what a machine's ranks get together.
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/model/adamw.hpp"

namespace po = boost::program_options;

namespace {

// STREAM's copy and triad over n floats on torch's intra-op threads (this file is built with
// OpenMP, as the update's), each pass touching its arrays in the same parts on the same threads
// as the first (host_zero), best of `repeats`. GB/s as STREAM counts it: 2 and 3 arrays moved.
struct stream_result {
  double copy_gbs = 0;
  double triad_gbs = 0;
};

stream_result stream(std::int64_t n, int repeats) {
  auto a = torch::empty({n}), b = torch::empty({n}), c = torch::empty({n});
  for (auto* t : {&a, &b, &c}) cohort::core::model::host_zero(*t);
  float* __restrict pa = a.data_ptr<float>();
  float* __restrict pb = b.data_ptr<float>();
  float* __restrict pc = c.data_ptr<float>();
  const std::int64_t grain = std::int64_t{1} << 16;  // the update's
  const auto best = [&](auto&& kernel) {
    double seconds = 1e30;
    for (int r = 0; r <= repeats; ++r) {  // the first pass untimed
      const auto t0 = std::chrono::steady_clock::now();
      at::parallel_for(0, n, grain, kernel);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) seconds = std::min(seconds, s);
    }
    return seconds;
  };
  const double copy_s = best([&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) pc[i] = pa[i];
  });
  const float scalar = 3.0f;
  const double triad_s = best([&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) pa[i] = pb[i] + scalar * pc[i];
  });
  const double bytes = 4.0 * static_cast<double>(n);
  return {2 * bytes / copy_s / 1e9, 3 * bytes / triad_s / 1e9};
}

}  // namespace
namespace model = cohort::core::model;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::int64_t elements = 0;
  int repeats = 0;
  po::options_description options("optimizer_bench options");
  options.add_options()("help,h", "this help")(
      "elements", po::value(&elements)->default_value(200'000'000), "fp32 elements of the shard")(
      "repeats", po::value(&repeats)->default_value(3), "timed updates of each kind (after one untimed)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << options;
      return 0;
    }
    if (elements <= 0 || repeats <= 0) throw std::invalid_argument("--elements and --repeats must be > 0");
  } catch (const std::exception& e) {
    std::cerr << "optimizer_bench: " << e.what() << "\n" << options;
    return 2;
  }
  auto param = torch::randn({elements});
  const auto grad = torch::randn({elements});
  auto copy = torch::empty({elements}, torch::kBFloat16);
  model::adamw_options o;
  o.weight_decay = 0.1;
  const double clip = 0.5;
  // Bytes a one-pass update moves per element: param, grad, both moments read; param and
  // moments written; the bf16 copy written.
  const double bytes = 4.0 * 4 + 3 * 4 + 2;
  const auto time = [&](auto&& update) {
    update();  // the moments' first touch
    const auto t0 = clock_type::now();
    for (int i = 0; i < repeats; ++i) update();
    return std::chrono::duration<double>(clock_type::now() - t0).count() / repeats;
  };
  model::adamw_state one_pass, ops;
  const double fused = time([&] { model::adamw_step_host(param, grad, one_pass, o, clip, copy); });
  auto scaled = grad.clone();
  const double torch_ops = time([&] {
    scaled.copy_(grad).mul_(clip);
    model::adamw_step(param, scaled, ops, o);
    copy.copy_(param);
  });
  const auto t0 = clock_type::now();
  const double squares = model::host_square_sum(grad);
  const double square_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double n = static_cast<double>(elements);
  const auto memory = stream(elements, repeats);
  const double update_gbs = bytes * n / fused / 1e9;
  std::printf("optimizer_bench: %lld elements, %d threads\n", static_cast<long long>(elements),
              at::get_num_threads());
  std::printf("  one pass (adamw_step_host):  %.3f s  %.2f ns/element  %.1f GB/s  (%.0f%% of copy)\n", fused,
              fused / n * 1e9, update_gbs, 100 * update_gbs / memory.copy_gbs);
  std::printf("  torch ops (baseline):        %.3f s  %.2f ns/element  (%.1fx the one pass)\n", torch_ops,
              torch_ops / n * 1e9, torch_ops / fused);
  std::printf("  gradient square sum:         %.3f s  %.2f ns/element  (sum %.6g)\n", square_s,
              square_s / n * 1e9, squares);
  std::printf("  memory, STREAM copy:         %.1f GB/s   triad: %.1f GB/s\n", memory.copy_gbs,
              memory.triad_gbs);
  return 0;
}
