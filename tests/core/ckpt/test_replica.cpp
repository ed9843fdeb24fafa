// Peer replicas' bookkeeping: who keeps whose copy, which replicas count, and when a restore must
// read storage instead (stale, damaged, missing).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/replica.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/temp_dir.hpp"

namespace ckpt = cohort::core::ckpt;
namespace fs = std::filesystem;
using ckpt::testing::write_fake_checkpoint;
using ckpt::testing::write_fake_rank;

namespace {

// Rank `rank`'s replica of step `step` (of `world` ranks) in the job's replica directory `dir`, as a
// save writes it: the shard files, then the record.
void write_replica(const std::string& dir, std::uint64_t step, int world, int rank) {
  const auto step_dir = ckpt::replica_step_dir(dir, step);
  const auto report = write_fake_rank(step_dir, step, world, rank);
  ckpt::write_replica_record(step_dir, {step, rank, world, report.files});
}

}  // namespace

TEST_CASE("every rank's buddy is on another node and every rank keeps exactly one copy", "[core][ckpt]") {
  CHECK(ckpt::choose_buddies({"a", "b"}) == std::vector<int>{1, 0});
  CHECK(ckpt::choose_buddies({"a", "a", "b", "b"}) == std::vector<int>{2, 3, 0, 1});
  CHECK(ckpt::choose_buddies({"a", "b", "a", "b"}) == std::vector<int>{1, 2, 3, 0});
  CHECK(ckpt::choose_buddies({"a", "a", "b", "b", "c", "c"}) == std::vector<int>{2, 3, 4, 5, 0, 1});
  // No other node, or no shift that keeps every copy off its rank's node: no buddies.
  CHECK(ckpt::choose_buddies({"a", "a"}).empty());
  CHECK(ckpt::choose_buddies({"a", "a", "a", "b"}).empty());
  CHECK(ckpt::choose_buddies({"a"}).empty());
}

TEST_CASE(
    "the restore plan takes each shard from its rank's own node first, else from the lowest rank "
    "whose node holds it, and names the shards no node holds",
    "[core][ckpt]") {
  const auto rec = [](std::uint64_t step, int rank, int world) {
    return ckpt::replica_record{step, rank, world, {}};
  };
  // Rank 0's node lost: the restarted rank 0 runs elsewhere and holds nothing; rank 1's node
  // holds its own shard and rank 0's copy.
  std::vector<std::vector<ckpt::replica_record>> held = {{}, {rec(6, 0, 2), rec(6, 1, 2)}};
  CHECK(ckpt::plan_sources(held, 6, 2) == std::vector<int>{1, 1});
  // Each node kept both: no transfer.
  held = {{rec(6, 0, 2), rec(6, 1, 2)}, {rec(6, 0, 2), rec(6, 1, 2)}};
  CHECK(ckpt::plan_sources(held, 6, 2) == std::vector<int>{0, 1});
  // Only copies of another step or another world size: nothing to take.
  held = {{rec(4, 0, 2)}, {rec(6, 1, 3)}};
  CHECK(ckpt::plan_sources(held, 6, 2) == std::vector<int>{-1, -1});
}

TEST_CASE(
    "a replica counts only when it is of the committed step and matches the manifest; a stale, "
    "damaged or missing one sends the restore to storage",
    "[core][ckpt]") {
  cohort::test::temp_dir tmp;
  const std::string run = tmp.str() + "/run", replicas = tmp.str() + "/replicas";
  const auto m = write_fake_checkpoint(ckpt::step_dir(run, 6), 6, 2);
  write_replica(replicas, 6, 2, 0);
  write_replica(replicas, 6, 2, 1);
  const auto step_dir = ckpt::replica_step_dir(replicas, 6);
  CHECK(ckpt::check_replica(step_dir, m, 0).empty());
  CHECK(ckpt::check_replica(step_dir, m, 1).empty());

  SECTION("damaged: a byte of the shard changed") {
    const auto shard = step_dir + "/" + ckpt::rank_shard_name(1);
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x55');
    f.close();
    CHECK_THAT(ckpt::check_replica(step_dir, m, 1), Catch::StartsWith("damaged: " + shard));
    CHECK(ckpt::check_replica(step_dir, m, 0).empty());
  }
  SECTION("missing: a shard file is gone, or the record was never written") {
    fs::remove(step_dir + "/" + ckpt::rank_state_name(0));
    CHECK_THAT(ckpt::check_replica(step_dir, m, 0), Catch::Contains("is missing"));
    fs::remove(step_dir + "/" + ckpt::replica_record_name(1));
    CHECK_THAT(ckpt::check_replica(step_dir, m, 1), Catch::StartsWith("no replica of rank 1"));
  }
  SECTION("stale: the replica is of another step than the committed one") {
    const auto older = write_fake_checkpoint(ckpt::step_dir(run, 4), 4, 2);
    CHECK_THAT(ckpt::check_replica(step_dir, older, 0),
               Catch::StartsWith("stale: ") && Catch::Contains("step 6"));
  }
  SECTION("a replica written by another save of the same step (other bytes) does not match") {
    const auto other = write_fake_checkpoint(ckpt::step_dir(run + "-other", 6), 6, 2);
    auto changed = other;
    for (auto& f : changed.files) f.xxh64 ^= 1;
    CHECK_THAT(ckpt::check_replica(step_dir, changed, 0), Catch::Contains("another checksum"));
  }
}

TEST_CASE("only replicas with their record count, and a save's drop keeps one step", "[core][ckpt]") {
  cohort::test::temp_dir tmp;
  const std::string dir = tmp.str();
  write_replica(dir, 4, 2, 0);
  write_replica(dir, 6, 2, 0);
  write_replica(dir, 6, 2, 1);
  write_fake_rank(ckpt::replica_step_dir(dir, 8), 8, 2, 0);  // written, never recorded
  const auto held = ckpt::scan_replicas(dir);
  REQUIRE(held.size() == 3);
  CHECK((held[0].step == 4 && held[0].rank == 0));
  CHECK((held[2].step == 6 && held[2].rank == 1));
  CHECK(held[1].files.size() == 2);

  ckpt::drop_replicas(dir, 6);
  CHECK(!fs::exists(ckpt::replica_step_dir(dir, 4)));
  CHECK(!fs::exists(ckpt::replica_step_dir(dir, 8)));
  CHECK(ckpt::scan_replicas(dir).size() == 2);
  ckpt::drop_replicas(dir, 0);
  CHECK(ckpt::scan_replicas(dir).empty());
}

TEST_CASE("a node's replica directory is per node, job and run, under COHORT_REPLICA_DIR when set",
          "[core][ckpt]") {
  const auto a = ckpt::replica_dir("/r", "n1", "job-1", "/runs/a");
  CHECK_THAT(a, Catch::StartsWith("/r/n1/job-1-"));
  CHECK(a != ckpt::replica_dir("/r", "n1", "job-1", "/runs/b"));
  CHECK(a != ckpt::replica_dir("/r", "n2", "job-1", "/runs/a"));
  {
    const cohort::test::scoped_env root("COHORT_REPLICA_DIR", "/somewhere");
    CHECK(ckpt::replica_root() == "/somewhere");
  }
  const cohort::test::scoped_env unset("COHORT_REPLICA_DIR", nullptr);
  if (fs::is_directory("/dev/shm")) CHECK(ckpt::replica_root() == "/dev/shm/cohort-replicas");  // host memory
}

TEST_CASE(
    "a restart may resume from the replica steps after the committed checkpoint, newest first, and one "
    "that lacks a rank's copy everywhere has no source for it",
    "[core][ckpt]") {
  const auto rec = [](std::uint64_t step, int rank, int world) {
    return ckpt::replica_record{step, rank, world, {}};
  };
  // Step 10 was being taken when the attempt ended: rank 1's copies were never recorded.
  const std::vector<std::vector<ckpt::replica_record>> held = {
      {rec(8, 0, 2), rec(8, 1, 2), rec(10, 0, 2)}, {rec(8, 0, 2), rec(8, 1, 2), rec(10, 0, 2), rec(6, 1, 3)}};
  CHECK(ckpt::replica_steps_after(held, 4, 2) == std::vector<std::uint64_t>{10, 8});
  CHECK(ckpt::replica_steps_after(held, 0, 2) == std::vector<std::uint64_t>{10, 8});
  CHECK(ckpt::replica_steps_after(held, 8, 2) == std::vector<std::uint64_t>{10});
  CHECK(ckpt::replica_steps_after(held, 10, 2).empty());
  CHECK(ckpt::replica_steps_after(held, 0, 3) == std::vector<std::uint64_t>{6});  // another world size's
  CHECK(ckpt::plan_sources(held, 10, 2) == std::vector<int>{0, -1});
  CHECK(ckpt::plan_sources(held, 8, 2) == std::vector<int>{0, 1});
}

TEST_CASE("a replica step's manifest reads back as written, and a step keeps the older one when asked",
          "[core][ckpt]") {
  cohort::test::temp_dir tmp;
  const std::string dir = tmp.str() + "/replicas";
  write_replica(dir, 4, 2, 0);
  write_replica(dir, 6, 2, 0);
  write_replica(dir, 8, 2, 0);
  const auto m = write_fake_checkpoint(ckpt::step_dir(tmp.str() + "/run", 6), 6, 2);
  ckpt::write_replica_manifest(ckpt::replica_step_dir(dir, 6), m, 1);
  const auto back = ckpt::read_replica_manifest(ckpt::replica_step_dir(dir, 6));
  CHECK(ckpt::manifest_to_json(back) == ckpt::manifest_to_json(m));
  CHECK(ckpt::check_replica(ckpt::replica_step_dir(dir, 6), back, 0).empty());
  CHECK(!fs::exists(ckpt::replica_step_dir(dir, 6) + "/manifest.json.rank-1"));  // renamed into place
  CHECK_THROWS_AS(ckpt::read_replica_manifest(ckpt::replica_step_dir(dir, 4)), ckpt::ckpt_error);
  ckpt::drop_replicas(dir, 8, 6);
  CHECK(!fs::exists(ckpt::replica_step_dir(dir, 4)));
  CHECK(fs::exists(ckpt::replica_step_dir(dir, 6)));
  CHECK(fs::exists(ckpt::replica_step_dir(dir, 8)));
}
