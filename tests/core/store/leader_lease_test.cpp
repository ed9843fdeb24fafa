// The leader lease: epochs only grow, a live lease is not taken, an expired one is, and no two
// contenders (threads or processes) ever win the same epoch.
#include "core/store/leader_lease.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/store/atomic_file.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"
#include "tests/support/temp_dir.hpp"

namespace store = cohort::core::store;
using namespace std::chrono_literals;

namespace {

// A clock the test moves by hand.
struct manual_clock {
  std::shared_ptr<std::int64_t> now = std::make_shared<std::int64_t>(1'000'000);
  store::clock_ms fn() const {
    auto p = now;
    return [p] { return *p; };
  }
  void advance(std::int64_t ms) { *now += ms; }
};

// Claim files' (epoch -> head_id).
std::map<std::int64_t, std::string> claims(const std::filesystem::path& store_dir) {
  std::map<std::int64_t, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(store::epochs_dir(store_dir))) {
    auto name = e.path().filename().string();
    if (name[0] == '.') continue;
    auto j = store::read_json(e.path());
    out[std::stoll(name)] = (*j)["head_id"].get<std::string>();
  }
  return out;
}

// Runs `rounds` acquire() calls as `head`; returns the epochs it won.
std::set<std::int64_t> contend(const std::filesystem::path& dir, const std::string& head,
                               int rounds) {
  store::leader_lease lease(dir);  // real clock; ttl 0 makes every lease expire at once
  std::set<std::int64_t> won;
  for (int i = 0; i < rounds; ++i)
    if (auto held = lease.acquire(head, head + ":1", 0ms)) won.insert(held->epoch);
  return won;
}

// Every epoch won by exactly one head, and that head is the one its claim file names.
void check_winners(const std::filesystem::path& dir,
                   const std::map<std::string, std::set<std::int64_t>>& won) {
  std::map<std::int64_t, std::string> winner;
  std::size_t total = 0;
  for (const auto& [head, epochs] : won) {
    total += epochs.size();
    for (auto epoch : epochs) {
      auto [it, fresh] = winner.emplace(epoch, head);
      INFO("epoch " << epoch << " won by " << it->second << " and " << head);
      CHECK(fresh);
    }
  }
  REQUIRE(total > 1);
  auto claimed = claims(dir);
  for (const auto& [epoch, head] : winner) CHECK(claimed.at(epoch) == head);
}

}  // namespace

TEST_CASE("A head takes a free lease at epoch 1 and keeps that epoch when it acquires again",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease lease(dir.path(), clock.fn());
  CHECK_FALSE(lease.current());
  CHECK(lease.current_epoch() == 0);
  auto held = lease.acquire("head-a", "10.0.0.1:6380", 5000ms);
  REQUIRE(held);
  CHECK(held->epoch == 1);
  CHECK(held->expires_at_ms == *clock.now + 5000);
  clock.advance(1000);
  auto again = lease.acquire("head-a", "10.0.0.1:6380", 5000ms);
  REQUIRE(again);
  CHECK(again->epoch == 1);
  CHECK(again->expires_at_ms == *clock.now + 5000);
  auto published = store::read_json(store::leader_path(dir.path()));
  REQUIRE(published);
  CHECK((*published)["epoch"] == 1);
  CHECK((*published)["head_id"] == "head-a");
  CHECK((*published)["address"] == "10.0.0.1:6380");
  CHECK((*published)["expires_at"] == again->expires_at_ms);
}

TEST_CASE("A live lease is not taken; an expired one goes to the next head with a higher epoch",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn()), b(dir.path(), clock.fn());
  REQUIRE(a.acquire("head-a", "a:1", 1000ms));
  clock.advance(999);
  CHECK_FALSE(b.acquire("head-b", "b:1", 1000ms));
  clock.advance(1);
  auto taken = b.acquire("head-b", "b:1", 1000ms);
  REQUIRE(taken);
  CHECK(taken->epoch == 2);
  CHECK(a.current()->head_id == "head-b");
  clock.advance(5000);
  auto back = a.acquire("head-a", "a:1", 1000ms);
  REQUIRE(back);
  CHECK(back->epoch == 3);
}

TEST_CASE("Renewing extends the lease, and fails once another head took it over", "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn()), b(dir.path(), clock.fn());
  auto held = a.acquire("head-a", "a:1", 1000ms);
  REQUIRE(held);
  for (int i = 0; i < 5; ++i) {
    clock.advance(800);
    auto renewed = a.renew(held->epoch, 1000ms);
    REQUIRE(renewed);
    CHECK(renewed->expires_at_ms == *clock.now + 1000);
    CHECK_FALSE(b.acquire("head-b", "b:1", 1000ms));
  }
  clock.advance(1001);
  REQUIRE(b.acquire("head-b", "b:1", 1000ms));
  CHECK_FALSE(a.renew(held->epoch, 1000ms));
  CHECK_FALSE(a.release(held->epoch));
  CHECK(a.current()->head_id == "head-b");
}

TEST_CASE("Releasing the lease lets a standby take over at once with a higher epoch",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn()), b(dir.path(), clock.fn());
  auto held = a.acquire("head-a", "a:1", 60000ms);
  REQUIRE(held);
  CHECK_FALSE(b.acquire("head-b", "b:1", 60000ms));
  REQUIRE(a.release(held->epoch));
  auto taken = b.acquire("head-b", "b:1", 60000ms);
  REQUIRE(taken);
  CHECK(taken->epoch == held->epoch + 1);
}

TEST_CASE("A claim whose head died before publishing it still counts, and expires like a lease",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn()), b(dir.path(), clock.fn());
  REQUIRE(a.acquire("head-a", "a:1", 1000ms));
  clock.advance(2000);
  store::lease_record ghost{2, "head-ghost", "g:1", *clock.now + 1000};
  REQUIRE(store::create_exclusive(store::epochs_dir(dir.path()) / "2", ghost.to_json().dump()));
  CHECK(b.current_epoch() == 2);
  CHECK(b.current()->head_id == "head-ghost");
  CHECK_FALSE(b.acquire("head-b", "b:1", 1000ms));
  CHECK_FALSE(a.renew(1, 1000ms));
  clock.advance(1000);
  auto taken = b.acquire("head-b", "b:1", 1000ms);
  REQUIRE(taken);
  CHECK(taken->epoch == 3);
}

TEST_CASE("Temp files left in the claims directory are ignored", "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn());
  std::ofstream(store::temp_path_for(store::epochs_dir(dir.path()) / "9")) << "{";
  auto held = a.acquire("head-a", "a:1", 1000ms);
  REQUIRE(held);
  CHECK(held->epoch == 1);
}

TEST_CASE("A corrupt leader file is refused with an error naming it and the bad field",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  store::leader_lease a(dir.path());
  auto path = store::leader_path(dir.path());
  std::ofstream(path) << R"({"epoch": 1, "head_id": "a", "address": "a:1", "expires_at": "soon"})";
  try {
    a.current();
    FAIL("corrupt leader.json accepted");
  } catch (const store::store_error& e) {
    CHECK(e.kind() == store::store_error_kind::corrupt);
    CHECK_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains("expires_at"));
  }
  std::ofstream(path) << "{\"epoch\": 1,";
  CHECK_THROWS_AS(a.acquire("head-b", "b:1", 1000ms), store::store_error);
}

TEST_CASE("Threads contending for the lease never both win one epoch", "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  const int threads = 4, rounds = 150;
  std::vector<std::set<std::int64_t>> won(threads);
  std::atomic<int> waiting{threads};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();  // start together
      won[t] = contend(dir.path(), "thread-" + std::to_string(t), rounds);
    });
  for (auto& th : pool) th.join();
  std::map<std::string, std::set<std::int64_t>> by_head;
  for (int t = 0; t < threads; ++t) by_head["thread-" + std::to_string(t)] = won[t];
  check_winners(dir.path(), by_head);
}

TEST_CASE("Processes contending for the lease never both win one epoch", "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  const int processes = 3, rounds = 150;
  int start[2];
  REQUIRE(::pipe(start) == 0);
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int code = 1;
      try {
        ::close(start[1]);
        char byte;
        (void)!::read(start[0], &byte, 1);  // returns at EOF: the parent released everyone
        auto head = "process-" + std::to_string(p);
        std::ofstream out(dir.path() / (head + ".won"));
        for (auto epoch : contend(dir.path(), head, rounds)) out << epoch << "\n";
        code = out.good() ? 0 : 1;
      } catch (...) {
      }
      ::_exit(code);
    }
    children.push_back(child);
  }
  ::close(start[0]);
  ::close(start[1]);
  std::map<std::string, std::set<std::int64_t>> by_head;
  for (int p = 0; p < processes; ++p) {
    int status = 0;
    REQUIRE(::waitpid(children[p], &status, 0) == children[p]);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    auto head = "process-" + std::to_string(p);
    std::ifstream in(dir.path() / (head + ".won"));
    for (std::int64_t epoch; in >> epoch;) by_head[head].insert(epoch);
  }
  check_winners(dir.path(), by_head);
}

TEST_CASE("A leader that learns its port after taking the lease publishes it, and keeps it through "
          "renewals; a deposed one cannot",
          "[core][store]") {
  cohort::test::temp_dir dir("store-lease");
  manual_clock clock;
  store::leader_lease a(dir.path(), clock.fn()), b(dir.path(), clock.fn());
  auto held = a.acquire("head-a", "127.0.0.1:0", 1000ms);
  REQUIRE(held);
  REQUIRE(a.renew(held->epoch, 1000ms, "127.0.0.1:40123"));
  CHECK(b.current()->address == "127.0.0.1:40123");
  REQUIRE(a.renew(held->epoch, 1000ms));
  CHECK(b.current()->address == "127.0.0.1:40123");
  clock.advance(2000);
  REQUIRE(b.acquire("head-b", "127.0.0.1:7411", 1000ms));
  CHECK_FALSE(a.renew(held->epoch, 1000ms, "127.0.0.1:40124"));
  CHECK(b.current()->address == "127.0.0.1:7411");
}
