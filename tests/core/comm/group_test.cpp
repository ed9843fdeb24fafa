// The Gloo process group with ranks as threads: results against a reference computed from every
// rank's data, argument errors, timeouts, abort and dead peers.
#include "core/comm/comm_error.hpp"
#include "core/comm/file_store.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "tests/core/comm/rank_threads.hpp"

#include <ATen/ATen.h>

#include "tests/support/catch_torch.hpp"

#include <unistd.h>

#include <future>
#include <random>

using namespace cohort::core::comm;
using cohort::test::gloo_options;
using cohort::test::run_ranks;
using cohort::test::unique_prefix;
using namespace std::chrono_literals;

namespace {

// Rank r's data for a test case: reproducible from (seed, rank) so the main thread can build
// the reference. Floats in [-1, 1], integers in [-1000, 1000].
at::Tensor rank_data(int seed, int rank, std::int64_t n, at::ScalarType dtype) {
  std::mt19937 gen(static_cast<unsigned>(seed * 1000 + rank));
  std::vector<double> v(static_cast<std::size_t>(n));
  if (at::isFloatingType(dtype)) {
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    for (auto& x : v) x = d(gen);
  } else {
    std::uniform_int_distribution<int> d(-1000, 1000);
    for (auto& x : v) x = d(gen);
  }
  return at::from_blob(v.data(), {n}, at::kDouble).clone().to(dtype);
}

// The reduction of every rank's data, in float64 (then cast to dtype).
at::Tensor reference(int seed, int world, std::int64_t n, at::ScalarType dtype, reduce_op op) {
  at::Tensor acc = rank_data(seed, 0, n, dtype).to(at::kDouble);
  for (int r = 1; r < world; ++r) {
    const at::Tensor x = rank_data(seed, r, n, dtype).to(at::kDouble);
    if (op == reduce_op::max) acc = at::maximum(acc, x);
    else if (op == reduce_op::min) acc = at::minimum(acc, x);
    else acc = acc + x;
  }
  if (op == reduce_op::avg) acc = acc / world;
  return acc.to(dtype);
}

bool close_to(const at::Tensor& got, const at::Tensor& want) {
  if (got.scalar_type() == at::kBFloat16)
    return at::allclose(got.to(at::kFloat), want.to(at::kFloat), 2e-2, 2e-2);
  if (at::isFloatingType(got.scalar_type())) return at::allclose(got, want, 1e-5, 1e-6);
  return at::equal(got, want);
}

std::string describe(at::ScalarType dtype, reduce_op op) {
  return std::string(c10::toString(dtype)) + " " + to_string(op);
}

const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kLong};
const std::vector<reduce_op> ops = {reduce_op::sum, reduce_op::avg, reduce_op::max, reduce_op::min};

}  // namespace

TEST_CASE("all_reduce matches the reference reduction on 1, 2 and 4 ranks", "[core][comm][gloo]") {
  const int world = GENERATE(1, 2, 4);
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("all_reduce");
  const std::int64_t n = 1037;  // not a multiple of the world size: all_reduce takes any length
  using outputs = std::vector<at::Tensor>;
  auto results = run_ranks<outputs>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix));
    outputs out;
    int seed = 0;
    for (auto dtype : dtypes)
      for (auto op : ops) {
        ++seed;
        if (op == reduce_op::avg && !at::isFloatingType(dtype)) continue;
        at::Tensor t = rank_data(seed, rank, n, dtype);
        pg->all_reduce(t, op)->wait(pg->timeout());
        out.push_back(t);
      }
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    std::size_t i = 0;
    int seed = 0;
    for (auto dtype : dtypes)
      for (auto op : ops) {
        ++seed;
        if (op == reduce_op::avg && !at::isFloatingType(dtype)) continue;
        INFO(describe(dtype, op));
        const auto& got = (*results[r].value)[i++];
        CHECK(got.scalar_type() == dtype);
        CHECK(close_to(got, reference(seed, world, n, dtype, op)));
      }
  }
}

TEST_CASE("reduce_scatter leaves each rank its chunk of the reduction and the input intact",
          "[core][comm][gloo]") {
  const int world = GENERATE(1, 2, 4);
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("reduce_scatter");
  const std::int64_t chunk = 777;
  struct out_t {
    std::vector<at::Tensor> chunks;
    bool inputs_intact = true;
  };
  auto results = run_ranks<out_t>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix));
    out_t out;
    int seed = 100;
    for (auto dtype : dtypes)
      for (auto op : ops) {
        ++seed;
        if (op == reduce_op::avg && !at::isFloatingType(dtype)) continue;
        const at::Tensor input = rank_data(seed, rank, chunk * world, dtype);
        const at::Tensor before = input.clone();
        at::Tensor output = at::empty({chunk}, input.options());
        pg->reduce_scatter(input, output, op)->wait(pg->timeout());
        out.chunks.push_back(output);
        out.inputs_intact = out.inputs_intact && at::equal(input, before);
      }
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(results[r].value->inputs_intact);
    std::size_t i = 0;
    int seed = 100;
    for (auto dtype : dtypes)
      for (auto op : ops) {
        ++seed;
        if (op == reduce_op::avg && !at::isFloatingType(dtype)) continue;
        INFO(describe(dtype, op));
        const at::Tensor want = reference(seed, world, chunk * world, dtype, op).narrow(0, r * chunk, chunk);
        CHECK(close_to(results[r].value->chunks[i++], want));
      }
  }
}

TEST_CASE("all_gather concatenates every rank's input in rank order", "[core][comm][gloo]") {
  const int world = GENERATE(1, 2, 4);
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("all_gather");
  const std::int64_t n = 333;
  auto results = run_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix));
    std::vector<at::Tensor> out;
    for (std::size_t d = 0; d < dtypes.size(); ++d) {
      const at::Tensor input = rank_data(200 + static_cast<int>(d), rank, n, dtypes[d]);
      at::Tensor output = at::empty({n * world}, input.options());
      pg->all_gather(input, output)->wait(pg->timeout());
      out.push_back(output);
    }
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    for (std::size_t d = 0; d < dtypes.size(); ++d) {
      std::vector<at::Tensor> parts;
      for (int src = 0; src < world; ++src) parts.push_back(rank_data(200 + static_cast<int>(d), src, n, dtypes[d]));
      CHECK(at::equal((*results[r].value)[d], at::cat(parts)));
    }
  }
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[core][comm][gloo]") {
  const int world = GENERATE(1, 2, 4);
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("broadcast");
  const std::int64_t n = 4099;
  auto results = run_ranks<std::vector<at::Tensor>>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix));
    std::vector<at::Tensor> out;
    for (int root : {0, world - 1}) {
      at::Tensor t = rank_data(300 + root, rank, n, at::kBFloat16);
      pg->broadcast(t, root)->wait(pg->timeout());
      out.push_back(t);
    }
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(at::equal((*results[r].value)[0], rank_data(300, 0, n, at::kBFloat16)));
    CHECK(at::equal((*results[r].value)[1], rank_data(300 + world - 1, world - 1, n, at::kBFloat16)));
  }
}

TEST_CASE("no rank leaves a barrier before every rank has entered it", "[core][comm][gloo]") {
  const int world = GENERATE(1, 2, 4);
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("barrier");
  std::atomic<int> entered{0};
  auto results = run_ranks<int>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix));
    ++entered;
    pg->barrier()->wait(pg->timeout());
    return entered.load();
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(*results[r].value == world);
  }
}

TEST_CASE("bad collective arguments are refused with a clear error and the group stays usable",
          "[core][comm][gloo]") {
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("bad-args");
  struct out_t {
    std::vector<std::string> errors;
    at::Tensor after;
  };
  auto results = run_ranks<out_t>(2, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, 2, prefix));
    out_t out;
    const auto refuse = [&](const std::function<void()>& f) {
      try {
        f();
        out.errors.push_back("accepted");
      } catch (const comm_error& e) {
        out.errors.push_back(e.code() == comm_errc::invalid_argument ? e.what() : "wrong code");
      }
    };
    refuse([&] { pg->reduce_scatter(at::ones({5}), at::empty({2}), reduce_op::sum); });
    refuse([&] { pg->all_gather(at::ones({2}), at::empty({5})); });
    refuse([&] { pg->reduce_scatter(at::ones({4}), at::empty({2}, at::kDouble), reduce_op::sum); });
    refuse([&] { pg->all_reduce(at::ones({4, 4}).t(), reduce_op::sum); });
    refuse([&] { pg->all_reduce(at::ones({4}, at::kLong), reduce_op::avg); });
    refuse([&] { pg->broadcast(at::ones({4}), 2); });
    refuse([&] { pg->all_reduce(at::ones({4}, at::kBool), reduce_op::sum); });
    out.after = at::ones({3});
    pg->all_reduce(out.after, reduce_op::sum)->wait(pg->timeout());
    return out;
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    const auto& e = results[r].value->errors;
    REQUIRE(e.size() == 7);
    CHECK_THAT(e[0], Catch::Contains("uneven") && Catch::Contains("reduce_scatter"));
    CHECK_THAT(e[1], Catch::Contains("uneven") && Catch::Contains("all_gather"));
    CHECK_THAT(e[2], Catch::Contains("dtype"));
    CHECK_THAT(e[3], Catch::Contains("contiguous"));
    CHECK_THAT(e[4], Catch::Contains("avg"));
    CHECK_THAT(e[5], Catch::Contains("root 2"));
    CHECK_THAT(e[6], Catch::Contains("Bool"));
    CHECK(at::equal(results[r].value->after, at::full({3}, 2.0)));
  }
}

TEST_CASE("ranks rendezvous through the TCP store and the file store", "[core][comm][gloo]") {
  const std::string secret = make_store_secret();
  tcp_store_server server("127.0.0.1", 0, secret);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cohort-comm-group-" + std::to_string(::getpid()));
  const bool use_tcp = GENERATE(true, false);
  INFO((use_tcp ? "tcp store" : "file store"));
  auto results = run_ranks<at::Tensor>(3, [&](int rank) {
    std::shared_ptr<store> st;
    if (use_tcp)
      st = std::make_shared<tcp_store>("127.0.0.1", server.port(), secret, 5s);
    else
      st = std::make_shared<file_store>(dir);
    auto pg = make_process_group(gloo_options(st, rank, 3, "job-1/attempt-0/"));
    at::Tensor t = at::full({8}, static_cast<double>(rank + 1));
    pg->all_reduce(t, reduce_op::sum)->wait(pg->timeout());
    return t;
  });
  std::filesystem::remove_all(dir);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(at::equal(*results[r].value, at::full({8}, 6.0)));
  }
}

TEST_CASE("a rank that never shows up makes rendezvous time out", "[core][comm][gloo]") {
  auto st = std::make_shared<memory_store>();
  const auto start = std::chrono::steady_clock::now();
  try {
    make_process_group(gloo_options(st, 0, 2, unique_prefix("lonely"), 1s));
    FAIL("the group formed without rank 1");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::timeout);
    CHECK_THAT(e.what(), Catch::Contains("rendezvous"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("abort unblocks a rank waiting on a collective its peer never joins",
          "[core][comm][gloo]") {
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("abort");
  const auto timeout = 2s;
  std::promise<void> aborted;
  auto aborted_future = aborted.get_future().share();
  struct out_t {
    comm_errc pending_code = comm_errc::backend_failure;
    comm_errc later_code = comm_errc::backend_failure;
    std::chrono::steady_clock::duration waited{};
  };
  auto results = run_ranks<out_t>(2, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, 2, prefix, timeout));
    store_barrier(*st, prefix + "connected", 2, timeout);  // both meshes complete before the abort
    out_t out;
    if (rank == 0) {
      auto w = pg->all_reduce(at::ones({1000}), reduce_op::sum);  // rank 1 never joins this one
      std::promise<void> waiting;
      auto waiting_future = waiting.get_future();
      std::thread waiter([&] {
        waiting.set_value();
        const auto start = std::chrono::steady_clock::now();
        try {
          w->wait(30s);
        } catch (const comm_error& e) {
          out.pending_code = e.code();
        }
        out.waited = std::chrono::steady_clock::now() - start;
      });
      waiting_future.wait();
      pg->abort("the test aborts rank 0");
      waiter.join();
      try {
        pg->barrier()->wait(30s);
      } catch (const comm_error& e) {
        out.later_code = e.code();
      }
      aborted.set_value();
    } else {
      aborted_future.wait();
      const auto start = std::chrono::steady_clock::now();
      try {
        pg->all_reduce(at::ones({1000}), reduce_op::sum)->wait(30s);
      } catch (const comm_error& e) {
        out.later_code = e.code();
      }
      out.waited = std::chrono::steady_clock::now() - start;
    }
    return out;
  });
  INFO("rank 0: " << results[0].error_text() << " rank 1: " << results[1].error_text());
  REQUIRE(results[0].value);
  REQUIRE(results[1].value);
  CHECK(results[0].value->pending_code == comm_errc::aborted);
  CHECK(results[0].value->waited < timeout);
  CHECK(results[0].value->later_code == comm_errc::aborted);
  // The peer of an aborted rank fails at once (its connection was reset), well before its timeout.
  CHECK(results[1].value->later_code == comm_errc::peer_failure);
  CHECK(results[1].value->waited < timeout);
}

TEST_CASE("a peer whose group is destroyed mid-collective makes the others fail, not hang",
          "[core][comm][gloo]") {
  const int world = 3;
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("dead-peer");
  const auto timeout = 2s;
  struct out_t {
    bool warmup_ok = false;
    comm_errc code = comm_errc::backend_failure;
    std::chrono::steady_clock::duration waited{};
  };
  auto results = run_ranks<out_t>(world, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, world, prefix, timeout));
    out_t out;
    at::Tensor t = at::ones({1 << 16});
    pg->all_reduce(t, reduce_op::sum)->wait(timeout);
    out.warmup_ok = at::equal(t, at::full({1 << 16}, 3.0));
    store_barrier(*st, prefix + "warm", world, timeout);
    at::Tensor big = at::ones({1 << 22});
    if (rank == 2) {
      pg->all_reduce(big, reduce_op::sum);
      pg->abort("rank 2 crashes");  // dies mid-collective: its connections are reset
      pg.reset();
      return out;
    }
    const auto start = std::chrono::steady_clock::now();
    auto first = pg->all_reduce(big, reduce_op::sum);
    auto second = pg->all_reduce(t, reduce_op::sum);
    try {
      first->wait(30s);
      second->wait(30s);
    } catch (const comm_error& e) {
      out.code = e.code();
    }
    out.waited = std::chrono::steady_clock::now() - start;
    return out;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(results[r].value->warmup_ok);
    if (r == 2) continue;
    CHECK((results[r].value->code == comm_errc::peer_failure || results[r].value->code == comm_errc::aborted));
    CHECK(results[r].value->waited < timeout);
  }
}

TEST_CASE("destroying a group without abort lets its queued operations finish",
          "[core][comm][gloo]") {
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("graceful");
  auto results = run_ranks<std::pair<bool, at::Tensor>>(2, [&](int rank) {
    auto pg = make_process_group(gloo_options(st, rank, 2, prefix));
    at::Tensor t = at::full({1 << 18}, static_cast<double>(rank + 1));
    auto w = pg->all_reduce(t, reduce_op::sum);
    pg.reset();  // no wait() before: the destructor drains the queue
    return std::make_pair(w->is_completed() && !w->exception(), t);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    REQUIRE(results[r].value);
    CHECK(results[r].value->first);
    CHECK(at::equal(results[r].value->second, at::full({1 << 18}, 3.0)));
  }
}

TEST_CASE("a pair proof answers one challenge for one group and one direction, and needs the secret",
          "[core][comm]") {
  const auto secret = make_store_secret();
  const auto challenge = make_pair_challenge();
  REQUIRE(challenge.size() == pair_challenge_bytes);
  CHECK(challenge != make_pair_challenge());
  const auto proof = pair_proof(secret, "job-1/attempt-0/dp/", 0, 1, challenge);
  REQUIRE(proof.size() == pair_proof_bytes);
  CHECK(check_pair_proof(secret, "job-1/attempt-0/dp/", 0, 1, challenge, proof));
  CHECK_FALSE(check_pair_proof(secret, "job-1/attempt-0/dp/", 1, 0, challenge, proof));  // the other way
  CHECK_FALSE(check_pair_proof(secret, "job-1/attempt-1/dp/", 0, 1, challenge, proof));  // another attempt
  CHECK_FALSE(check_pair_proof(secret, "job-1/attempt-0/dp/", 0, 1, make_pair_challenge(), proof));
  CHECK_FALSE(check_pair_proof(make_store_secret(), "job-1/attempt-0/dp/", 0, 1, challenge, proof));
  CHECK_FALSE(check_pair_proof(secret, "job-1/attempt-0/dp/", 0, 1, challenge, proof.substr(1)));
  // The parts are length-delimited: moving a byte from the group into the ranks changes the proof.
  CHECK(pair_proof(secret, "g1", 0, 1, challenge) != pair_proof(secret, "g", 10, 1, challenge));
}

TEST_CASE(
    "ranks holding the attempt's secret prove every pair and reduce; a process holding another, "
    "though it reached every pair, fails the group on every rank naming the pair before any tensor "
    "moves",
    "[core][comm][gloo]") {
  const auto secret = make_store_secret();
  const bool impostor = GENERATE(false, true);
  INFO((impostor ? "rank 2 holds another secret" : "every rank holds the secret"));
  const auto other = make_store_secret();
  auto st = std::make_shared<memory_store>();
  const auto prefix = unique_prefix("proved");
  auto results = run_ranks<at::Tensor>(3, [&](int rank) {
    auto options = gloo_options(st, rank, 3, prefix, 20s);
    options.peer_secret = impostor && rank == 2 ? other : secret;
    auto pg = make_process_group(options);
    at::Tensor t = at::full({4}, static_cast<double>(rank + 1));
    pg->all_reduce(t, reduce_op::sum)->wait(pg->timeout());
    return t;
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << results[r].error_text());
    if (!impostor) {
      REQUIRE(results[r].value);
      CHECK(at::equal(*results[r].value, at::full({4}, 6.0)));
      continue;
    }
    CHECK_FALSE(results[r].value);
    const std::string named = r == 2 ? "rank 0" : "rank 2";
    CHECK_THAT(results[r].error_text(), Catch::StartsWith("peer failure") &&
                                            Catch::Contains("the process connected as " + named +
                                                            " did not prove that it belongs to this group"));
  }
}
