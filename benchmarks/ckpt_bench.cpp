// ckpt_bench: save and load throughput of a multi-rank checkpoint (ranks as threads), the time
// training is blocked per checkpoint in async mode, beside dd's write and read speed on the same
// disk. Everything it writes goes under --dir and is deleted at the end.
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/ckpt/async_writer.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/ckpt/reshard.hpp"
#include "core/ckpt/writer.hpp"
#include "tools/command_line.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
namespace ckpt = cohort::core::ckpt;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void evict(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Runs fn(rank) on one thread per rank and rethrows the first error.
template <class Fn>
void on_rank_threads(int ranks, Fn fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void run_or_throw(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("command failed: " + cmd);
}

struct dd_speed {
  double write_mb_s = 0;
  double read_mb_s = 0;
};

// dd on the same disk: write with fdatasync, read from disk after eviction.
dd_speed measure_dd(const fs::path& root, double mb) {
  const fs::path file = root / "dd.bin";
  const auto blocks = static_cast<long>(mb / 4 + 0.5);
  dd_speed out;
  auto t0 = clock_type::now();
  run_or_throw("dd if=/dev/zero of='" + file.string() + "' bs=4M count=" + std::to_string(blocks) +
               " conv=fdatasync status=none");
  out.write_mb_s = static_cast<double>(blocks) * 4.194304 / seconds_since(t0);
  evict(root);
  t0 = clock_type::now();
  run_or_throw("dd if='" + file.string() + "' of=/dev/null bs=4M status=none");
  out.read_mb_s = static_cast<double>(blocks) * 4.194304 / seconds_since(t0);
  fs::remove(file);
  return out;
}

// One logical fp32 tensor "flat" of n elements, rank r holds its even_partition slice.
std::vector<ckpt::shard_tensor> rank_tensors(const std::vector<float>& slice, std::uint64_t numel,
                                             const ckpt::flat_range& r) {
  return {{"flat", "F32", {static_cast<std::int64_t>(slice.size())}, slice.data(), slice.size() * 4,
           {{"flat", {static_cast<std::int64_t>(numel)}, r.offset, r.length, 0}}}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double gb = 1.0;
  int ranks = 4;
  po::options_description desc("ckpt_bench options");
  desc.add_options()("help,h", "print this help")("dir", po::value(&dir)->required(), "scratch directory (deleted)")(
      "gb", po::value(&gb)->default_value(1.0), "checkpoint size in GB (1e9 bytes)")(
      "ranks", po::value(&ranks)->default_value(4), "ranks (threads) writing shards");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("ckpt_bench", argc, argv, desc, vm)) return *done;
  if (gb <= 0 || ranks <= 0) {
    std::cerr << "ckpt_bench: --gb and --ranks must be positive\n" << desc << "\n";
    return 2;
  }
  const fs::path root = fs::path(dir) / "ckpt-bench";
  try {
    fs::create_directories(root);
    const std::uint64_t numel = static_cast<std::uint64_t>(gb * 1e9 / 4);
    const double mb = static_cast<double>(numel) * 4 / 1e6;
    std::vector<std::vector<float>> slices(static_cast<std::size_t>(ranks));
    std::vector<ckpt::flat_range> ranges;
    for (int r = 0; r < ranks; ++r) {
      ranges.push_back(ckpt::even_partition(numel, ranks, r));
      auto& s = slices[static_cast<std::size_t>(r)];
      s.resize(ranges.back().length);
      for (std::uint64_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>((ranges.back().offset + i) % 1000003);
    }
    std::printf("checkpoint: %.0f MB fp32 in %d rank shards under %s\n", mb, ranks, root.c_str());

    const dd_speed dd_before = measure_dd(root, mb);

    // Synchronous save: every rank writes its shard in parallel (write, fsync, checksum), then commit.
    const std::string run = (root / "run").string();
    const std::string step1 = ckpt::step_dir(run, 1);
    auto t0 = clock_type::now();
    std::vector<ckpt::rank_report> reports(static_cast<std::size_t>(ranks));
    on_rank_threads(ranks, [&](int r) {
          ckpt::rank_state state;
          state.step = 1;
          reports[static_cast<std::size_t>(r)] = ckpt::write_rank_shard(
              step1, r, rank_tensors(slices[static_cast<std::size_t>(r)], numel, ranges[static_cast<std::size_t>(r)]),
              state);
    });
    const ckpt::manifest m = ckpt::commit_checkpoint(step1, 1, ranks, reports);
    const double save_s = seconds_since(t0);

    // Async save: training blocks for the host copy (each rank's own, as separate processes do)
    // and the submit; the write then overlaps training.
    std::vector<ckpt::async_rank_writer> writers(static_cast<std::size_t>(ranks));
    const std::string step2 = ckpt::step_dir(run, 2);
    t0 = clock_type::now();
    std::vector<std::vector<ckpt::owned_shard_tensor>> owned(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const auto& s = slices[static_cast<std::size_t>(r)];
      const auto& range = ranges[static_cast<std::size_t>(r)];
      std::vector<std::uint8_t> host(s.size() * 4);
      std::memcpy(host.data(), s.data(), host.size());
      owned[static_cast<std::size_t>(r)].push_back({"flat", "F32", {static_cast<std::int64_t>(s.size())}, std::move(host),
                                                    {{"flat", {static_cast<std::int64_t>(numel)}, range.offset, range.length, 0}}});
    }
    const double copy_s = seconds_since(t0);
    const auto t_submit = clock_type::now();
    for (int r = 0; r < ranks; ++r) {
      ckpt::rank_state state;
      state.step = 2;
      writers[static_cast<std::size_t>(r)].submit(step2, r, std::move(owned[static_cast<std::size_t>(r)]), state);
    }
    const double submit_s = seconds_since(t_submit);
    std::vector<ckpt::rank_report> reports2;
    for (auto& w : writers) reports2.push_back(*w.wait());
    ckpt::commit_checkpoint(step2, 2, ranks, reports2);
    const double async_total_s = seconds_since(t0);

    // Loads, cold: verify (read + XXH64 of every file), load every rank's shard, re-shard to 1 rank.
    evict(root);
    t0 = clock_type::now();
    const ckpt::verify_result v = ckpt::verify_checkpoint(step1);
    const double verify_s = seconds_since(t0);
    if (!v.ok()) throw std::runtime_error("verify failed: " + v.problems.front());
    evict(root);
    t0 = clock_type::now();
    on_rank_threads(ranks, [&](int r) {
          const ckpt::rank_shard shard = ckpt::load_rank_shard(step1, m, r);
          std::vector<float> dst(shard.nbytes("flat") / 4);
          shard.read("flat", dst.data());
          if (dst != slices[static_cast<std::size_t>(r)]) throw std::runtime_error("loaded bytes differ");
    });
    const double load_s = seconds_since(t0);
    evict(root);
    t0 = clock_type::now();
    {
      ckpt::reshard_reader reader(step1, m);
      std::vector<float> all(numel);
      reader.read("flat", 0, numel, all.data());
      if (all[numel - 1] != static_cast<float>((numel - 1) % 1000003)) throw std::runtime_error("re-shard bytes differ");
    }
    const double reshard_s = seconds_since(t0);

    const dd_speed dd_after = measure_dd(root, mb);
    std::printf("dd write (fdatasync) %.0f MB/s before, %.0f MB/s after | dd read (cold) %.0f / %.0f MB/s\n",
                dd_before.write_mb_s, dd_after.write_mb_s, dd_before.read_mb_s, dd_after.read_mb_s);
    std::printf("save, %d ranks in parallel (write + fsync + XXH64 + commit): %.2f s, %.0f MB/s\n", ranks, save_s, mb / save_s);
    std::printf("async save: training blocked %.3f s per checkpoint (%.3f s per rank's host copy of %.0f MB, submit %.4f s),"
                " write finished %.2f s after submit (%.0f MB/s)\n",
                copy_s / ranks + submit_s / ranks, copy_s / ranks, mb / ranks, submit_s / ranks, async_total_s - copy_s,
                mb / (async_total_s - copy_s));
    std::printf("verify (cold read + XXH64 of every file): %.2f s, %.0f MB/s\n", verify_s, mb / verify_s);
    std::printf("load %d rank shards (cold, parallel): %.2f s, %.0f MB/s\n", ranks, load_s, mb / load_s);
    std::printf("re-shard %d -> 1 rank (cold): %.2f s, %.0f MB/s\n", ranks, reshard_s, mb / reshard_s);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    fs::remove_all(root);
    return 1;
  }
  fs::remove_all(root);
  return 0;
}
