// The NCCL process group, ranks as threads on one GPU each (hidden tag [.gpu]: run on a machine
// with at least two GPUs as `test_core_comm "[gpu]"`). Built only with COHORT_CUDA.
#include "core/comm/comm_error.hpp"
#include "tests/core/comm/rank_threads.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include "tests/support/catch_torch.hpp"

#include <future>
#include <optional>
#include <string>

using namespace cohort::core::comm;
using cohort::test::run_ranks;
using cohort::test::unique_prefix;
using namespace std::chrono_literals;

namespace {

int gpu_world() {
  const int n = c10::cuda::device_count();
  if (n < 2) FAIL("these tests need 2 CUDA devices, this machine has " << n);
  return 2;
}

group_options nccl_options(std::shared_ptr<store> s, int rank, int world, const std::string& prefix,
                           std::chrono::milliseconds timeout = 60s) {
  group_options o;
  o.backend = backend_kind::nccl;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous = std::move(s);
  o.key_prefix = prefix;
  o.timeout = timeout;
  o.cuda_device = rank;
  return o;
}

at::Tensor rank_values(int rank, std::int64_t n, at::ScalarType dtype, int device) {
  return (at::arange(n, at::kDouble) * 0.001 + rank).to(at::TensorOptions().dtype(dtype).device(at::kCUDA, device));
}

}  // namespace

TEST_CASE("NCCL collectives match the reference on two GPUs", "[core][comm][.gpu]") {
  const int world = gpu_world();
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("nccl");
  const std::int64_t n = 1 << 20;
  struct out_t {
    at::Tensor sum_f32, avg_bf16, max_f32, scattered, gathered, broadcasted;
  };
  auto results = run_ranks<out_t>(world, [&](int rank) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(rank));
    auto pg = make_process_group(nccl_options(st, rank, world, prefix));
    out_t out;
    at::Tensor a = rank_values(rank, n, at::kFloat, rank);
    pg->all_reduce(a, reduce_op::sum)->wait(pg->timeout());
    out.sum_f32 = a.cpu();
    at::Tensor b = rank_values(rank, n, at::kBFloat16, rank);
    pg->all_reduce(b, reduce_op::avg)->wait(pg->timeout());
    out.avg_bf16 = b.cpu();
    at::Tensor c = rank_values(rank, n, at::kFloat, rank);
    pg->all_reduce(c, reduce_op::max)->wait(pg->timeout());
    out.max_f32 = c.cpu();
    at::Tensor in = rank_values(rank, n * world, at::kFloat, rank);
    at::Tensor part = at::empty({n}, in.options());
    auto w = pg->reduce_scatter(in, part, reduce_op::sum);
    w->wait_stream(pg->timeout());  // the caller's stream waits; .cpu() below runs after it
    out.scattered = part.cpu();
    at::Tensor gathered = at::empty({n * world}, in.options());
    pg->all_gather(rank_values(rank, n, at::kFloat, rank), gathered)->wait(pg->timeout());
    out.gathered = gathered.cpu();
    at::Tensor bc = rank_values(rank, n, at::kFloat, rank);
    pg->broadcast(bc, 1)->wait(pg->timeout());
    out.broadcasted = bc.cpu();
    pg->barrier()->wait(pg->timeout());
    return out;
  });
  const auto base = at::arange(n, at::kDouble) * 0.001;
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    const auto& o = *results[r].value;
    CHECK(at::allclose(o.sum_f32.to(at::kDouble), base * world + (world * (world - 1) / 2.0), 1e-5, 1e-4));
    CHECK(at::allclose(o.avg_bf16.to(at::kDouble), (base * world + (world * (world - 1) / 2.0)) / world, 2e-2, 2e-2));
    CHECK(at::allclose(o.max_f32.to(at::kDouble), base + (world - 1), 1e-5, 1e-4));
    const auto full = at::arange(n * world, at::kDouble) * 0.001 * world + (world * (world - 1) / 2.0);
    CHECK(at::allclose(o.scattered.to(at::kDouble), full.narrow(0, r * n, n), 1e-5, 1e-3));
    std::vector<at::Tensor> parts;
    for (int src = 0; src < world; ++src) parts.push_back((base + src).to(at::kFloat));
    CHECK(at::equal(o.gathered, at::cat(parts)));
    CHECK(at::equal(o.broadcasted, (base + 1).to(at::kFloat)));
  }
}

TEST_CASE("NCCL abort fails a pending collective at once and the peer times out instead of hanging",
          "[core][comm][.gpu]") {
  const int world = gpu_world();
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("nccl-abort");
  const auto timeout = 3s;
  std::promise<void> aborted;
  auto aborted_future = aborted.get_future().share();
  struct out_t {
    std::optional<comm_errc> code;  // empty: the collective did not fail
    std::string message;
    std::chrono::steady_clock::duration waited{};
  };
  auto results = run_ranks<out_t>(world, [&](int rank) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(rank));
    auto pg = make_process_group(nccl_options(st, rank, world, prefix, timeout));
    pg->barrier()->wait(timeout);
    store_barrier(*st, prefix + "ready", world, timeout);
    out_t out;
    if (rank == 0) {
      auto w = pg->all_reduce(rank_values(rank, 1 << 20, at::kFloat, rank), reduce_op::sum);
      const auto start = std::chrono::steady_clock::now();
      pg->abort("the test aborts rank 0");
      try {
        w->wait(30s);
      } catch (const comm_error& e) {
        out.code = e.code();
        out.message = e.what();
      }
      out.waited = std::chrono::steady_clock::now() - start;
      aborted.set_value();
    } else {
      aborted_future.wait();
      const auto start = std::chrono::steady_clock::now();
      // Rank 0 enqueued one all-reduce before aborting, and NCCL may still complete its partner
      // here (seen on 2 H200s: the first all-reduce succeeded). The next one has no partner: it
      // can never complete, and the watchdog must fail it at the timeout instead of hanging.
      for (int i = 0; i < 2 && !out.code; ++i) {
        try {
          pg->all_reduce(rank_values(rank, 1 << 20, at::kFloat, rank), reduce_op::sum)->wait(30s);
        } catch (const comm_error& e) {
          out.code = e.code();
          out.message = e.what();
        }
      }
      out.waited = std::chrono::steady_clock::now() - start;
    }
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    INFO("rank " << r << " failed with: " << results[r].value->message);
    REQUIRE(results[r].value->code);
  }
  INFO("rank 0: " << results[0].value->message << "; rank 1: " << results[1].value->message);
  CHECK(*results[0].value->code == comm_errc::aborted);
  CHECK(results[0].value->waited < 1s);
  CHECK((*results[1].value->code == comm_errc::timeout || *results[1].value->code == comm_errc::peer_failure));
  CHECK(results[1].value->waited < timeout + 5s);
}
