// Checkpoints in S3 against a real S3-compatible server (s3rver): multipart rank uploads, the
// COMMITTED-last commit, verified resume from a local copy, a killed upload, damage, retention,
// and the cohort-ckpt tool on S3 locations.
#include "tests/support/catch_torch.hpp"

#include <cstring>
#include <filesystem>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/s3_checkpoints.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tool_run.hpp"

using namespace cohort::core::ckpt;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t part_size = 5ull << 20;        // S3's smallest part
constexpr std::size_t big_numel = (6ull << 20) / 4;  // 6 MiB of floats: two parts

std::vector<float> big_values(std::uint64_t step, int rank) {
  std::vector<float> v(big_numel);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(step * 1000 + rank) + 1e-3f * static_cast<float>(i % 997);
  return v;
}

// Rank `rank` writes its part of step `step` into its own staging directory (as on its own node):
// one 6 MiB tensor "weights.<rank>" and a replicated "step_count".
rank_report write_big_rank(const std::string& dir, std::uint64_t step, int rank) {
  const auto values = big_values(step, rank);
  const std::int64_t step_count = static_cast<std::int64_t>(step);
  std::vector<shard_tensor> tensors;
  tensors.push_back({"weights." + std::to_string(rank), "F32", {static_cast<std::int64_t>(big_numel)}, values.data(),
                     values.size() * 4, {}});
  tensors.push_back({"step_count", "I64", {1}, &step_count, 8, {}});
  rank_state state;
  state.step = step;
  state.rng = "rng-" + std::to_string(rank);
  state.sampler = {{"position", step * 4}};
  return write_rank_shard(dir, rank, tensors, state);
}

struct s3_fixture {
  cohort::test::s3_server server;
  cohort::core::storage::s3_client client{server.config()};
  s3_run run{&client, cohort::core::storage::parse_s3_url("s3://" + server.bucket() + "/runs/job-a", "test")};
  cohort::test::temp_dir local{"s3-ckpt"};

  // Every rank writes and uploads; the committer commits. Returns the manifest.
  manifest save(std::uint64_t step, int world, const nlohmann::json& metrics = nlohmann::json::object()) {
    std::vector<rank_report> reports;
    for (int r = 0; r < world; ++r) {
      const auto dir = step_dir(local.path("node-" + std::to_string(r)), step);
      reports.push_back(write_big_rank(dir, step, r));
      upload_rank_files(run, dir, reports.back(), part_size);
    }
    return commit_checkpoint_s3(run, step, world, reports, metrics);
  }
  bool exists(const std::string& key_under_run) const {
    return client.head_object(run.url.bucket, run.url.key(key_under_run)).has_value();
  }
};

}  // namespace

TEST_CASE("a checkpoint every rank uploads in parts and the committer commits to S3 resumes bitwise from a verified copy",
          "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  std::vector<rank_report> reports;
  std::vector<std::pair<std::string, int>> parts;
  for (int r = 0; r < 2; ++r) {
    const auto dir = step_dir(f.local.path("node-" + std::to_string(r)), 4);
    reports.push_back(write_big_rank(dir, 4, r));
    upload_rank_files(f.run, dir, reports.back(), part_size,
                      [&](const std::string& file, int n) { parts.emplace_back(file, n); });
  }
  // Each shard went up in two acknowledged parts; the small state file in one PUT.
  CHECK(std::count(parts.begin(), parts.end(), std::make_pair(rank_shard_name(1), 2)) == 1);
  CHECK(std::count(parts.begin(), parts.end(), std::make_pair(rank_state_name(0), 1)) == 1);
  CHECK_FALSE(f.exists("checkpoints/step-00000004/COMMITTED"));
  CHECK(scan_checkpoints_s3(f.run).at(0).committed == false);

  const manifest m = commit_checkpoint_s3(f.run, 4, 2, reports, {{"loss", 1.5}});
  CHECK(m.world_size == 2);
  CHECK(f.exists("checkpoints/step-00000004/manifest.json"));
  CHECK(f.exists("checkpoints/step-00000004/COMMITTED"));
  const auto listed = scan_checkpoints_s3(f.run);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].committed);
  CHECK(listed[0].path == "s3://" + f.server.bucket() + "/runs/job-a/checkpoints/step-00000004");

  cohort::test::temp_dir cache("s3-cache");
  const auto latest = latest_valid_s3(f.run, cache.str());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 4);
  CHECK(latest.checkpoint->path == step_dir(cache.str(), 4));
  CHECK(verify_checkpoint(latest.checkpoint->path).ok());
  for (int r = 0; r < 2; ++r) {
    const auto shard = load_rank_shard(latest.checkpoint->path, *latest.manifest_read, r);
    CHECK(shard.state().rng == "rng-" + std::to_string(r));
    const auto key = "weights." + std::to_string(r);
    std::vector<float> back(big_numel);
    REQUIRE(shard.nbytes(key) == back.size() * 4);
    shard.read(key, back.data());
    const auto expected = big_values(4, r);
    CHECK(std::memcmp(back.data(), expected.data(), back.size() * 4) == 0);
  }
}

TEST_CASE("an upload killed mid-multipart never looks committed and resume picks the previous checkpoint",
          "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  f.save(2, 2);
  std::vector<rank_report> reports;
  for (int r = 0; r < 2; ++r) {
    const auto dir = step_dir(f.local.path("node-" + std::to_string(r)), 4);
    reports.push_back(write_big_rank(dir, 4, r));
  }
  upload_rank_files(f.run, step_dir(f.local.path("node-0"), 4), reports[0], part_size);
  CHECK_THROWS_WITH(upload_rank_files(f.run, step_dir(f.local.path("node-1"), 4), reports[1], part_size,
                                      [](const std::string& file, int n) {
                                        if (file == rank_shard_name(1) && n == 1) throw std::runtime_error("killed");
                                      }),
                    "killed");
  CHECK_FALSE(f.exists("checkpoints/step-00000004/" + rank_shard_name(1)));
  CHECK_FALSE(f.exists("checkpoints/step-00000004/COMMITTED"));
  // A committer handed both reports anyway finds rank 1's shard missing and commits nothing.
  try {
    commit_checkpoint_s3(f.run, 4, 2, reports);
    FAIL("a step with a missing shard was committed");
  } catch (const ckpt_error& e) {
    CHECK(e.code() == ckpt_errc::missing_file);
    CHECK_THAT(e.what(), Catch::Contains("step-00000004/rank-00001.safetensors: reported by rank 1 but missing"));
  }
  CHECK_FALSE(f.exists("checkpoints/step-00000004/COMMITTED"));
  CHECK_FALSE(f.exists("checkpoints/step-00000004/manifest.json"));

  cohort::test::temp_dir cache("s3-cache");
  const auto latest = latest_valid_s3(f.run, cache.str());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 2);
  REQUIRE(latest.rejected.size() == 1);
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains("step-00000004: no COMMITTED marker"));
  CHECK_THROWS_AS(download_checkpoint_s3(f.run, 4, cache.path("x")), ckpt_error);

  // The next attempt's cleanup (no writer running) removes the dead upload's leftovers.
  retention_policy p;
  p.writer_running = false;
  const auto cleaned = apply_retention_s3(f.run, p);
  CHECK(cleaned.removed_incomplete == std::vector<std::string>{f.run.url.text() + "/checkpoints/step-00000004"});
  CHECK_FALSE(f.exists("checkpoints/step-00000004/" + rank_shard_name(0)));
  CHECK(scan_checkpoints_s3(f.run).size() == 1);
}

TEST_CASE("a committed checkpoint damaged in S3 is rejected naming its object and the previous one is used",
          "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  f.save(2, 1);
  f.save(4, 1);
  const auto key = f.run.url.key("checkpoints/step-00000004/" + rank_shard_name(0));
  std::string bytes = f.client.get_object(f.run.url.bucket, key);
  bytes[bytes.size() - 3] ^= 0x40;
  f.client.put_object(f.run.url.bucket, key, bytes);
  cohort::test::temp_dir cache("s3-cache");
  const auto latest = latest_valid_s3(f.run, cache.str());
  REQUIRE(latest.checkpoint);
  CHECK(latest.checkpoint->step == 2);
  REQUIRE(latest.rejected.size() == 1);
  CHECK(latest.rejected[0].path == f.run.url.text() + "/checkpoints/step-00000004");
  CHECK_THAT(latest.rejected[0].reason, Catch::Contains(rank_shard_name(0)) && Catch::Contains("checksum mismatch"));
}

TEST_CASE("retention in S3 keeps the newest or the best by a metric and deletes the rest, COMMITTED first",
          "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  const double losses[] = {0.5, 0.2, 0.9, 0.7};
  for (std::uint64_t step = 1; step <= 4; ++step) {
    std::vector<rank_report> reports;
    const auto dir = step_dir(f.local.str(), step);
    reports.push_back(testing::write_fake_rank(dir, step, 1, 0));
    upload_rank_files(f.run, dir, reports.back());
    commit_checkpoint_s3(f.run, step, 1, reports, {{"loss", losses[step - 1]}});
  }
  retention_policy best;
  best.num_to_keep = 2;
  best.score_attribute = "loss";
  best.score_order = "min";
  const auto r = apply_retention_s3(f.run, best);
  CHECK(r.kept == std::vector<std::uint64_t>{2, 4});  // the newest, and the lowest loss
  CHECK(r.deleted == std::vector<std::uint64_t>{1, 3});
  CHECK(f.client.list_objects(f.run.url.bucket, f.run.url.key("checkpoints/step-00000001/")).empty());
  retention_policy newest;
  newest.num_to_keep = 1;
  CHECK(apply_retention_s3(f.run, newest).kept == std::vector<std::uint64_t>{4});
  CHECK(scan_checkpoints_s3(f.run).size() == 1);
}

TEST_CASE("a zombie attempt's commit to S3 is refused once a newer attempt claimed the run", "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  const attempt_token old_attempt{"job-7", 0}, new_attempt{"job-7", 1};
  claim_checkpoints_s3(f.run, old_attempt);
  const auto dir = step_dir(f.local.str(), 3);
  std::vector<rank_report> reports{testing::write_fake_rank(dir, 3, 1, 0)};
  upload_rank_files(f.run, dir, reports[0]);
  claim_checkpoints_s3(f.run, new_attempt);
  try {
    commit_checkpoint_s3(f.run, 3, 1, reports, nlohmann::json::object(), nlohmann::json::object(), &old_attempt);
    FAIL("the zombie committed");
  } catch (const ckpt_error& e) {
    CHECK(e.code() == ckpt_errc::stale_attempt);
    CHECK_THAT(e.what(), Catch::Contains("attempt 2 has started since"));
  }
  CHECK_FALSE(f.exists("checkpoints/step-00000003/COMMITTED"));
  CHECK_THROWS_AS(claim_checkpoints_s3(f.run, old_attempt), ckpt_error);
  commit_checkpoint_s3(f.run, 3, 1, reports, nlohmann::json::object(), nlohmann::json::object(), &new_attempt);
  CHECK(f.exists("checkpoints/step-00000003/COMMITTED"));
}

TEST_CASE("cohort-ckpt lists, verifies and refuses checkpoints in S3 as it does on disk", "[core][ckpt][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_fixture f;
  f.save(2, 1);
  f.save(4, 1);
  const auto dir = step_dir(f.local.path("node-0"), 6);
  upload_rank_files(f.run, dir, write_big_rank(dir, 6, 0), part_size);  // never committed
  const cohort::test::s3_environment credentials;
  const std::string endpoint = " --endpoint " + f.server.endpoint();
  const std::string run = f.run.url.text();

  const auto ls = cohort::test::run_tool("cohort-ckpt", "ls " + run + endpoint);
  CHECK(ls.code == 0);
  CHECK_THAT(ls.out, Catch::Contains("committed") && Catch::Contains("incomplete"));
  const auto ok = cohort::test::run_tool("cohort-ckpt", "verify " + run + "/checkpoints/step-00000004" + endpoint);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains(run + "/checkpoints/step-00000004: OK (step 4, world size 1"));
  const auto unfinished = cohort::test::run_tool("cohort-ckpt", "verify " + run + "/checkpoints/step-00000006" + endpoint);
  CHECK(unfinished.code == 1);
  CHECK_THAT(unfinished.err, Catch::Contains("step-00000006: no COMMITTED marker"));

  const auto key = f.run.url.key("checkpoints/step-00000004/" + rank_state_name(0));
  f.client.put_object(f.run.url.bucket, key, f.client.get_object(f.run.url.bucket, key) + " ");
  const auto damaged = cohort::test::run_tool("cohort-ckpt", "verify " + run + "/checkpoints/step-00000004" + endpoint);
  CHECK(damaged.code == 1);
  CHECK_THAT(damaged.err, Catch::Contains(rank_state_name(0)) && Catch::Contains("INVALID"));
  const auto not_a_step = cohort::test::run_tool("cohort-ckpt", "verify " + run + endpoint);
  CHECK(not_a_step.code == 1);
  CHECK_THAT(not_a_step.err, Catch::Contains("does not name a checkpoint"));
}
