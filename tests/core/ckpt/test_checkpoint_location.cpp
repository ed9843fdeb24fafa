// The checkpoint_location contract, every case run on both places checkpoints are kept: a run
// directory on disk and a run in S3 (a real s3rver). Ranks write their files into local step
// directories (on disk: the run's own; for S3: a staging directory per node), publish them, and
// the committer commits; what a rank reads back is a verified local directory (from S3, for a
// rank that resumes with the step's world size, its own files only, checked).
#include "tests/support/catch_torch.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ckpt/checkpoint_location.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/files.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::ckpt;
using cohort::core::ckpt::testing::write_fake_rank;
namespace fs = std::filesystem;
namespace storage = cohort::core::storage;

namespace {

constexpr int world = 2;

// One place with what the contract's cases need around it: where rank r stages step s, and how
// to damage a committed step's shard of rank 1 (same size, other bytes).
struct place {
  std::string name;
  cohort::test::temp_dir tmp{"ckpt-location"};
  std::unique_ptr<cohort::test::s3_server> server;  // S3 only
  std::unique_ptr<checkpoint_location> location;
  std::function<std::string(int, std::uint64_t)> staging;
  std::function<void(std::uint64_t)> damage;

  // Every rank writes and publishes step `step`; the committer commits it unless `commit` is false.
  void save(std::uint64_t step, bool commit = true, const attempt_token* token = nullptr,
            const nlohmann::json& metrics = nlohmann::json::object()) {
    std::vector<rank_report> reports;
    for (int r = 0; r < world; ++r) {
      reports.push_back(write_fake_rank(staging(r, step), step, world, r));
      location->publish(staging(r, step), reports.back(), {});
    }
    if (commit) location->commit(staging(0, step), step, world, reports, metrics, {}, token);
  }
};

std::unique_ptr<place> on_disk() {
  auto p = std::make_unique<place>();
  p->name = "on disk";
  const std::string run = p->tmp.path("run");
  p->location = local_checkpoints(run);
  p->staging = [run](int, std::uint64_t step) { return step_dir(run, step); };
  p->damage = [run](std::uint64_t step) {
    const std::string shard = step_dir(run, step) + "/" + rank_shard_name(1);
    std::string bytes = cohort::test::read_file(shard);
    bytes.back() = static_cast<char>(bytes.back() ^ 1);
    cohort::test::write_file(shard, bytes);
  };
  return p;
}

std::unique_ptr<place> in_s3() {
  auto p = std::make_unique<place>();
  p->name = "in S3";
  p->server = std::make_unique<cohort::test::s3_server>();
  auto client = std::make_unique<storage::s3_client>(p->server->config());
  const auto url = storage::parse_s3_url("s3://" + p->server->bucket() + "/runs/job", "test");
  p->location = s3_checkpoints(std::move(client), url, p->tmp.path("cache"));
  const std::string tmp = p->tmp.path("");
  p->staging = [tmp](int rank, std::uint64_t step) {
    return step_dir(tmp + "/node-" + std::to_string(rank), step);
  };
  p->damage = [server = p->server.get(), url](std::uint64_t step) {
    const storage::s3_client c(server->config());
    const std::string key = url.key("checkpoints/" + step_dir_name(step) + "/" + rank_shard_name(1));
    std::string bytes = c.get_object(url.bucket, key);
    bytes.back() = static_cast<char>(bytes.back() ^ 1);
    c.put_object(url.bucket, key, bytes);
  };
  return p;
}

// Runs `check` on both places (S3 only where the test server is installed), each named.
void for_each_place(const std::function<void(place*)>& check) {
  std::vector<std::function<std::unique_ptr<place>()>> makers{on_disk};
  if (cohort::test::s3rver_available()) makers.push_back(in_s3);
  for (const auto& make : makers) {
    const auto p = make();
    INFO(p->name);
    check(p.get());
  }
}

// Every (done, total) a transfer reported.
struct progress_log {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  transfer_progress callback() {
    return [this](std::uint64_t done, std::uint64_t total) { calls.emplace_back(done, total); };
  }
  // From (0, total) to (total, total), never back, the total the same throughout.
  void check_whole(std::uint64_t total) const {
    REQUIRE_FALSE(calls.empty());
    CHECK(calls.front() == std::make_pair(std::uint64_t{0}, total));
    CHECK(calls.back() == std::make_pair(total, total));
    for (std::size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].second == total);
      if (i > 0) CHECK(calls[i].first >= calls[i - 1].first);
    }
  }
};

std::uint64_t bytes_under(const std::string& dir) {
  std::uint64_t n = 0;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file()) n += f.file_size();
  return n;
}

std::vector<std::uint64_t> steps_of(const std::vector<checkpoint_info>& list) {
  std::vector<std::uint64_t> steps;
  for (const auto& c : list) steps.push_back(c.step);
  return steps;
}

}  // namespace

TEST_CASE("a location lists its committed checkpoints and gives each rank a verified local copy to read",
          "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    p->save(2);
    p->save(4);
    p->save(6, /*commit=*/false);  // every rank's files, never committed
    CHECK(steps_of(p->location->committed()) == std::vector<std::uint64_t>{2, 4});
    const auto latest = p->location->latest_valid();
    REQUIRE(latest.checkpoint);
    CHECK(latest.checkpoint->step == 4);
    CHECK(read_manifest(latest.checkpoint->path).step == 4);
    REQUIRE(latest.rejected.size() == 1);
    CHECK_FALSE(latest.rejected[0].committed);
    CHECK_THAT(latest.rejected[0].path, Catch::Contains(step_dir_name(6)));
    const std::string copy = p->location->fetch(2, std::nullopt, {});
    CHECK(verify_checkpoint(copy).ok());
    CHECK(read_manifest(copy).step == 2);
    CHECK_THAT(p->location->step_name(4),
               Catch::Contains(p->location->where()) && Catch::EndsWith(step_dir_name(4)));
    // Right after a commit only a run on disk has the step's files on this machine.
    CHECK(p->location->local_copy(4).has_value() == (p->name == "on disk"));
  });
}

TEST_CASE(
    "a rank that resumes from S3 with the step's world size downloads only its own files and "
    "checks them; with another world size, every file",
    "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    p->save(2);
    const auto names = [](const std::string& dir) {
      std::vector<std::string> out;
      for (const auto& f : fs::directory_iterator(dir)) out.push_back(f.path().filename().string());
      std::sort(out.begin(), out.end());
      return out;
    };
    const auto all = names(p->location->fetch(2, std::nullopt, {}));
    REQUIRE(all.size() == 2 * world + 2);  // each rank's shard and state, the manifest, COMMITTED
    progress_log downloaded;
    const std::string own = p->location->fetch(2, resuming_rank{1, world}, downloaded.callback());
    CHECK(read_manifest(own).step == 2);
    if (!p->server) {  // on disk: the step's own directory, nothing moved
      CHECK(names(own) == all);
      CHECK(downloaded.calls.empty());
      return;
    }
    CHECK(names(own) ==
          std::vector<std::string>{committed_name, manifest_name, rank_state_name(1), rank_shard_name(1)});
    downloaded.check_whole(bytes_under(own));
    // Four ranks resume from two: each reads pieces of both ranks' shards.
    CHECK(names(p->location->fetch(2, resuming_rank{3, 4}, {})) == all);
    // Rank 1's shard damaged in S3: rank 1's download says so; rank 0's does not read it.
    p->damage(2);
    try {
      p->location->fetch(2, resuming_rank{1, world}, {});
      FAIL("a damaged shard was taken");
    } catch (const ckpt_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(step_dir_name(2)) && Catch::Contains("does not verify") &&
                               Catch::Contains(rank_shard_name(1)) && Catch::Contains("another checksum"));
    }
    CHECK(names(p->location->fetch(2, resuming_rank{0, world}, {})) ==
          std::vector<std::string>{committed_name, manifest_name, rank_state_name(0), rank_shard_name(0)});
  });
}

TEST_CASE("a location sets a damaged committed checkpoint aside and the one before it is the newest valid",
          "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    p->save(2);
    p->save(4);
    p->damage(4);
    const auto latest = p->location->latest_valid();
    REQUIRE(latest.checkpoint);
    CHECK(latest.checkpoint->step == 2);
    REQUIRE(latest.rejected.size() == 1);
    CHECK(latest.rejected[0].committed);
    CHECK_THAT(latest.rejected[0].reason, Catch::Contains(rank_shard_name(1)));
    CHECK_FALSE(p->location->set_aside(latest.rejected[0]).empty());
    CHECK(steps_of(p->location->committed()) == std::vector<std::uint64_t>{2});
    p->save(4);  // the step written again is committed and valid
    CHECK(p->location->latest_valid().checkpoint->step == 4);
  });
}

TEST_CASE("a location claimed by a newer attempt refuses an older attempt's commit", "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    const attempt_token older{"job-1", 0}, newer{"job-1", 1};
    p->location->claim(older);
    p->save(2, true, &older);
    p->location->claim(newer);
    try {
      p->save(4, true, &older);
      FAIL("the older attempt's commit was accepted");
    } catch (const ckpt_error& e) {
      CHECK(e.code() == ckpt_errc::stale_attempt);
    }
    CHECK(steps_of(p->location->committed()) == std::vector<std::uint64_t>{2});
    p->save(4, true, &newer);
    CHECK(steps_of(p->location->committed()) == std::vector<std::uint64_t>{2, 4});
  });
}

TEST_CASE(
    "a location's retention keeps the best checkpoints by a metric and removes dead attempts' leftovers",
    "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    p->save(2, true, nullptr, {{"loss", 0.5}});
    p->save(4, true, nullptr, {{"loss", 0.9}});
    p->save(6, true, nullptr, {{"loss", 0.7}});
    p->save(8, /*commit=*/false);
    retention_policy policy;
    policy.num_to_keep = 2;
    policy.score_attribute = "loss";
    policy.score_order = "min";
    policy.writer_running = false;
    const auto r = p->location->retain(policy);
    CHECK(r.deleted == std::vector<std::uint64_t>{4});
    CHECK(r.removed_incomplete.size() == 1);
    CHECK(steps_of(p->location->committed()) == std::vector<std::uint64_t>{2, 6});
  });
}

TEST_CASE("a location makes an export written on this machine the run's", "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    const std::string dir = p->tmp.path("run/model");
    fs::create_directories(dir);
    cohort::test::write_file(dir + "/config.json", "{}");
    const std::string where = p->location->publish_export(dir, "model", {});
    CHECK_THAT(where, Catch::Contains(dir));
    if (p->server) {
      const storage::s3_client c(p->server->config());
      CHECK(c.get_object(p->server->bucket(), "runs/job/model/config.json") == "{}");
      CHECK_THAT(where, Catch::StartsWith("s3://" + p->server->bucket() + "/runs/job/model"));
    }
  });
}

TEST_CASE(
    "a location in S3 counts the bytes its uploads and downloads move as they move, one on disk moves none",
    "[core][ckpt][s3]") {
  for_each_place([](place* p) {
    const rank_report report = write_fake_rank(p->staging(0, 2), 2, 1, 0);
    std::uint64_t files = 0;
    for (const auto& f : report.files) files += f.size;
    progress_log uploaded, downloaded, exported;
    p->location->publish(p->staging(0, 2), report, uploaded.callback());
    p->location->commit(p->staging(0, 2), 2, 1, {report}, nlohmann::json::object(), {}, nullptr);
    const std::string copy = p->location->fetch(2, std::nullopt, downloaded.callback());
    // An export whose weights go up in three parts (8 MiB each at most), its config in one.
    const std::string dir = p->tmp.path("run/model");
    fs::create_directories(dir);
    const std::uint64_t weights = (std::uint64_t{20} << 20) + 3;
    cohort::test::write_file(dir + "/config.json", "{}");
    cohort::test::write_file(dir + "/model.safetensors", std::string(weights, 'w'));
    p->location->publish_export(dir, "model", exported.callback());
    if (!p->server) {
      CHECK(uploaded.calls.empty());
      CHECK(downloaded.calls.empty());
      CHECK(exported.calls.empty());
      return;
    }
    uploaded.check_whole(files);
    downloaded.check_whole(bytes_under(copy));
    exported.check_whole(weights + 2);
    CHECK(exported.calls.size() == 5);  // the start, the weights' three parts, the config
  });
}
