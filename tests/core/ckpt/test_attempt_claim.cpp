// Attempt claims: a zombie attempt of a job cannot commit a checkpoint once a newer attempt of the
// same job has claimed the job's checkpoints.
#include "tests/support/catch_torch.hpp"

#include <filesystem>

#include "core/ckpt/attempt_claim.hpp"
#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "tests/core/ckpt/fake_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace cohort::core::ckpt;
using namespace cohort::core::ckpt::testing;
using cohort::test::temp_dir;

namespace {

std::vector<rank_report> write_ranks(const std::string& dir, std::uint64_t step, int world) {
  std::vector<rank_report> reports;
  for (int r = 0; r < world; ++r) reports.push_back(write_fake_rank(dir, step, world, r));
  return reports;
}

}  // namespace

TEST_CASE("a zombie attempt's checkpoint commit is refused once a newer attempt claimed the job's "
          "checkpoints, and it leaves the step uncommitted",
          "[core][ckpt]") {
  temp_dir tmp("claim");
  const auto run = tmp.str() + "/run";
  const attempt_token old_attempt{"job-7", 0};
  const attempt_token new_attempt{"job-7", 1};
  claim_checkpoints(run, old_attempt);

  // While it owns the checkpoints, attempt 1 commits, and COMMITTED names it.
  const auto first = step_dir(run, 2);
  commit_checkpoint(first, 2, 2, write_ranks(first, 2, 2), nlohmann::json::object(), nlohmann::json::object(), &old_attempt);
  CHECK(list_checkpoints(run).size() == 1);

  claim_checkpoints(run, new_attempt);  // the head restarted the group; the old one runs on
  CHECK(newest_claim(run, "job-7") == 1);
  const auto zombie = step_dir(run, 4);
  const auto reports = write_ranks(zombie, 4, 2);
  try {
    commit_checkpoint(zombie, 4, 2, reports, nlohmann::json::object(), nlohmann::json::object(), &old_attempt);
    FAIL("the zombie's commit was accepted");
  } catch (const ckpt_error& e) {
    CHECK(e.code() == ckpt_errc::stale_attempt);
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("refused the commit of step-00000004 by attempt 1 of job job-7") &&
                   Catch::Contains("zombie") && Catch::Contains("attempt 2 has started since"));
  }
  CHECK_FALSE(fs::exists(fs::path(zombie) / committed_name));
  CHECK_FALSE(fs::exists(fs::path(zombie) / manifest_name));
  CHECK(list_checkpoints(run).size() == 1);

  // The newer attempt commits the same step; the zombie cannot even claim again.
  commit_checkpoint(zombie, 4, 2, reports, nlohmann::json::object(), nlohmann::json::object(), &new_attempt);
  CHECK(list_checkpoints(run).size() == 2);
  CHECK_THROWS_AS(claim_checkpoints(run, old_attempt), ckpt_error);
}

TEST_CASE("a zombie attempt's commit into a directory the newer attempt's retention removed is refused "
          "as a zombie's, not as missing files",
          "[core][ckpt]") {
  temp_dir tmp("claim");
  const auto run = tmp.str() + "/run";
  const attempt_token old_attempt{"job-7", 0};
  claim_checkpoints(run, old_attempt);
  const auto zombie = step_dir(run, 4);
  const auto reports = write_ranks(zombie, 4, 2);
  claim_checkpoints(run, attempt_token{"job-7", 1});
  fs::remove_all(zombie);  // the new attempt removed the dead attempt's unfinished save
  try {
    commit_checkpoint(zombie, 4, 2, reports, nlohmann::json::object(), nlohmann::json::object(), &old_attempt);
    FAIL("the zombie's commit was accepted");
  } catch (const ckpt_error& e) {
    CHECK(e.code() == ckpt_errc::stale_attempt);
    CHECK_THAT(std::string(e.what()), Catch::Contains("refused the commit of step-00000004 by attempt 1"));
  }
  CHECK_FALSE(fs::exists(zombie));
}

TEST_CASE("attempt claims of another job, and commits without a token, are not fenced", "[core][ckpt]") {
  temp_dir tmp("claim");
  const auto run = tmp.str() + "/run";
  claim_checkpoints(run, {"job-8", 5});
  CHECK_FALSE(newest_claim(run, "job-7").has_value());
  const auto dir = step_dir(run, 1);
  const attempt_token mine{"job-7", 0};
  CHECK_NOTHROW(commit_checkpoint(dir, 1, 1, write_ranks(dir, 1, 1), nlohmann::json::object(), nlohmann::json::object(), &mine));
  CHECK_THROWS_WITH(claim_checkpoints(run, {"../x", 0}), Catch::Contains("cannot name a file"));
  // The claims lie beside the checkpoints: checkpoints/ holds only step directories.
  CHECK(scan_checkpoints(run).size() == 1);
  CHECK(fs::exists(fs::path(run) / "attempts" / "job-8.5"));
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run))) entries += e.is_directory() ? 1 : 0;
  CHECK(entries == 1);
}
