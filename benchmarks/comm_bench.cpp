// cohort-comm-bench: all_reduce and reduce_scatter bus bandwidth through cohort's process_group,
// one process per rank, rendezvous through the TCP store (rank 0 serves it unless told not to).
// Bus bandwidth follows nccl-tests: algbw = bytes / time; all_reduce busbw = algbw * 2(n-1)/n,
// reduce_scatter busbw = algbw * (n-1)/n, where bytes is the size of the full (input) tensor.
//
//   COHORT_STORE_SECRET=<64 hex digits, the same for every rank>
//   cohort-comm-bench --rank R --world-size N --store 127.0.0.1:29500 --backend nccl --device cuda:R
#include "core/comm/comm_error.hpp"
#include "core/comm/process_group.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "tools/command_line.hpp"

#include <ATen/ATen.h>
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

namespace po = boost::program_options;
using namespace cohort::core::comm;

namespace {

struct bench_options {
  int rank = 0;
  int world_size = 1;
  std::string store = "127.0.0.1:29500";
  bool serve_store = true;
  std::string backend = "gloo";
  std::string device = "cpu";
  std::string dtype = "float32";
  std::int64_t min_bytes = 1 << 20;
  std::int64_t max_bytes = std::int64_t{1} << 30;
  int warmup = 5;
  int iters = 20;
  int timeout_s = 300;
  std::string key_prefix = "comm-bench/";
  bool json = false;
};

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return at::kFloat;
  if (s == "bfloat16") return at::kBFloat16;
  if (s == "float16") return at::kHalf;
  throw std::invalid_argument("--dtype '" + s + "' is not known (allowed: float32, bfloat16, float16)");
}

// Runs `iters` back-to-back operations and waits for the last; returns seconds per operation.
double time_op(process_group& pg, const std::function<std::shared_ptr<work>()>& op, int warmup,
               int iters) {
  for (int i = 0; i < warmup; ++i) op()->wait(pg.timeout());
  pg.barrier()->wait(pg.timeout());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<work>> all;
  for (int i = 0; i < iters; ++i) all.push_back(op());
  for (auto& w : all) w->wait(pg.timeout());
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return took.count() / iters;
}

int run(const bench_options& o) {
  const auto backend = parse_backend(o.backend);
  const auto dtype = parse_dtype(o.dtype);
  const at::Device device(o.device);
  if (backend == backend_kind::gloo && !device.is_cpu())
    throw std::invalid_argument("--backend gloo takes --device cpu, got " + o.device);
  if (backend == backend_kind::nccl && !device.is_cuda())
    throw std::invalid_argument("--backend nccl takes --device cuda:N, got " + o.device);
  if (o.min_bytes <= 0 || o.max_bytes < o.min_bytes)
    throw std::invalid_argument("--min-bytes must be positive and at most --max-bytes");

  const host_port where = parse_host_port(o.store);
  const char* secret_hex = std::getenv("COHORT_STORE_SECRET");
  if (secret_hex == nullptr)
    throw std::invalid_argument("set COHORT_STORE_SECRET to the same 64 hex digits for every rank "
                                "(e.g. $(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')): the store "
                                "serves only clients that hold it");
  const std::string secret = store_secret_from_hex(secret_hex, "$COHORT_STORE_SECRET");
  std::unique_ptr<tcp_store_server> server;
  if (o.rank == 0 && o.serve_store)
    server = std::make_unique<tcp_store_server>(where.host, where.port, secret);
  const std::chrono::milliseconds timeout = std::chrono::seconds(o.timeout_s);

  group_options g;
  g.backend = backend;
  g.rank = o.rank;
  g.world_size = o.world_size;
  g.rendezvous = std::make_shared<tcp_store>(where.host, where.port, secret, timeout);
  g.key_prefix = o.key_prefix;
  g.timeout = timeout;
  g.cuda_device = device.is_cuda() ? device.index() : -1;
  auto pg = make_process_group(g);

  const auto options = at::TensorOptions().device(device).dtype(dtype);
  const std::int64_t elem = static_cast<std::int64_t>(c10::elementSize(dtype));
  const double n = o.world_size;
  if (o.rank == 0 && !o.json)
    std::printf("# cohort-comm-bench backend=%s world=%d dtype=%s device=%s iters=%d\n"
                "%-15s %14s %12s %12s %12s\n",
                o.backend.c_str(), o.world_size, o.dtype.c_str(), o.device.c_str(), o.iters, "op",
                "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
  for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    // Whole elements, divisible into world_size equal chunks.
    const std::int64_t count = std::max<std::int64_t>(bytes / elem / o.world_size, 1) * o.world_size;
    const double size = static_cast<double>(count * elem);
    at::Tensor buf = at::ones({count}, options);
    at::Tensor out = at::empty({count / o.world_size}, options);
    struct result {
      const char* op;
      double seconds;
      double factor;
    };
    const result results[] = {
        {"all_reduce",
         time_op(*pg, [&] { return pg->all_reduce(buf, reduce_op::sum); }, o.warmup, o.iters),
         2.0 * (n - 1) / n},
        {"reduce_scatter",
         time_op(*pg, [&] { return pg->reduce_scatter(buf, out, reduce_op::sum); }, o.warmup, o.iters),
         (n - 1) / n},
    };
    if (o.rank != 0) continue;
    for (const auto& r : results) {
      const double algbw = size / r.seconds / 1e9;
      if (o.json)
        std::printf("{\"impl\": \"cohort\", \"backend\": \"%s\", \"op\": \"%s\", \"bytes\": %.0f, "
                    "\"world_size\": %d, \"time_us\": %.2f, \"algbw_gbps\": %.3f, \"busbw_gbps\": %.3f}\n",
                    o.backend.c_str(), r.op, size, o.world_size, r.seconds * 1e6, algbw, algbw * r.factor);
      else
        std::printf("%-15s %14.0f %12.1f %12.2f %12.2f\n", r.op, size, r.seconds * 1e6, algbw,
                    algbw * r.factor);
      std::fflush(stdout);
    }
  }
  pg->barrier()->wait(pg->timeout());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench_options o;
  po::options_description desc("cohort-comm-bench: collective bus bandwidth through cohort's process_group");
  desc.add_options()
      ("help,h", "print this help")
      ("rank", po::value(&o.rank)->required(), "this process's rank, 0..world-size-1")
      ("world-size", po::value(&o.world_size)->required(), "number of ranks (processes)")
      ("store", po::value(&o.store)->default_value(o.store), "rendezvous TCP store HOST:PORT")
      ("no-serve-store", "rank 0 does not serve the store (someone else already does)")
      ("backend", po::value(&o.backend)->default_value(o.backend), "gloo or nccl")
      ("device", po::value(&o.device)->default_value(o.device), "cpu (gloo) or cuda:N (nccl)")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "float32, bfloat16 or float16")
      ("min-bytes", po::value(&o.min_bytes)->default_value(o.min_bytes), "smallest message size")
      ("max-bytes", po::value(&o.max_bytes)->default_value(o.max_bytes), "largest message size (sizes double)")
      ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed operations per size")
      ("iters", po::value(&o.iters)->default_value(o.iters), "timed operations per size")
      ("timeout", po::value(&o.timeout_s)->default_value(o.timeout_s), "seconds for rendezvous and each operation")
      ("key-prefix", po::value(&o.key_prefix)->default_value(o.key_prefix), "store key prefix of this run")
      ("json", "print one JSON object per measurement instead of a table");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("cohort-comm-bench", argc, argv, desc, vm)) return *done;
  try {
    o.serve_store = vm.count("no-serve-store") == 0;
    o.json = vm.count("json") > 0;
    if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
      throw std::invalid_argument("--rank must be in 0..world-size-1 and --world-size >= 1");
    if (o.iters < 1 || o.warmup < 0) throw std::invalid_argument("--iters must be >= 1 and --warmup >= 0");
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "cohort-comm-bench (rank " << o.rank << "): " << e.what() << "\n";
    return 1;
  }
}
