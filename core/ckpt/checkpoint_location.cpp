// The two places checkpoints are kept: a run directory on disk, and a run in S3.
#include "core/ckpt/checkpoint_location.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/replica.hpp"
#include "core/ckpt/s3_checkpoints.hpp"

namespace cohort::core::ckpt {
namespace {

std::vector<checkpoint_info> only_committed(std::vector<checkpoint_info> all) {
  all.erase(std::remove_if(all.begin(), all.end(), [](const checkpoint_info& c) { return !c.committed; }),
            all.end());
  return all;
}

class local_location final : public checkpoint_location {
 public:
  explicit local_location(std::string run_dir) : run_dir_(std::move(run_dir)) {}

  std::string where() const override { return checkpoints_dir(run_dir_); }
  std::string step_name(std::uint64_t step) const override { return step_dir(run_dir_, step); }
  void claim(const attempt_token& token) override { claim_checkpoints(run_dir_, token); }
  std::vector<checkpoint_info> committed() const override { return list_checkpoints(run_dir_); }
  latest_result latest_valid() override { return ckpt::latest_valid(run_dir_); }
  std::string set_aside(const rejected_checkpoint& r) override {
    const std::string aside = r.path + ".rejected-" + std::to_string(std::time(nullptr));
    if (std::rename(r.path.c_str(), aside.c_str()) != 0)
      throw ckpt_error(ckpt_errc::io, "cannot move rejected checkpoint " + r.path + " aside to " + aside);
    return "moved to " + aside;
  }
  std::string fetch(std::uint64_t step, const std::optional<resuming_rank>&,
                    const transfer_progress&) override {
    return step_dir(run_dir_, step);
  }
  // The files are written in place.
  void publish(const std::string&, const rank_report&, const transfer_progress&) override {}
  manifest commit(const std::string& dir, std::uint64_t step, int world_size,
                  const std::vector<rank_report>& reports, const nlohmann::json& metrics,
                  const nlohmann::json& extra, const attempt_token* token) override {
    return commit_checkpoint(dir, step, world_size, reports, metrics, extra, token);
  }
  std::optional<std::string> local_copy(std::uint64_t step) const override {
    return step_dir(run_dir_, step);
  }
  retention_result retain(const retention_policy& policy) override {
    return apply_retention(run_dir_, policy);
  }
  std::string publish_export(const std::string& dir, const std::string&, const transfer_progress&) override {
    return dir;
  }

 private:
  std::string run_dir_;
};

class s3_location final : public checkpoint_location {
 public:
  s3_location(std::unique_ptr<storage::s3_client> client, storage::s3_url url, std::string cache_dir)
      : client_(std::move(client)), run_{client_.get(), std::move(url)}, cache_dir_(std::move(cache_dir)) {
    std::error_code ec;
    std::filesystem::remove_all(cache_dir_, ec);  // copies an earlier attempt downloaded
  }

  std::string where() const override { return run_.url.text() + "/checkpoints"; }
  std::string step_name(std::uint64_t step) const override { return s3_step_url(run_, step); }
  void claim(const attempt_token& token) override { claim_checkpoints_s3(run_, token); }
  std::vector<checkpoint_info> committed() const override {
    return only_committed(scan_checkpoints_s3(run_));
  }
  latest_result latest_valid() override { return latest_valid_s3(run_, cache_dir_); }
  std::string set_aside(const rejected_checkpoint& r) override {
    const auto step = parse_step_dir_name(std::filesystem::path(r.path).filename().string());
    if (!step) throw ckpt_error(ckpt_errc::bad_input, r.path + ": not a checkpoint of " + where());
    uncommit_checkpoint_s3(run_, *step);
    return "its COMMITTED removed";
  }
  std::string fetch(std::uint64_t step, const std::optional<resuming_rank>& resuming,
                    const transfer_progress& progress) override {
    const std::string dir = step_dir(cache_dir_, step);
    const auto failed = [&](const std::string& why) {
      return ckpt_error(ckpt_errc::bad_manifest, "checkpoint " + step_name(step) + " downloaded to " + dir +
                                                     " does not verify: " + why);
    };
    if (resuming) {
      download_checkpoint_s3(run_, step, dir, progress,
                             [&](const manifest& m, const file_record& f) { return resuming->reads(m, f); });
      const manifest m = read_manifest(dir);
      if (m.world_size == resuming->world_size) {  // its own files only
        if (const auto bad = mismatched_files(dir, m, resuming->rank); !bad.empty()) throw failed(bad);
        return dir;
      }
    } else {
      download_checkpoint_s3(run_, step, dir, progress);
    }
    const auto v = verify_checkpoint(dir);
    if (!v.ok()) throw failed(v.problems.front());
    return dir;
  }
  void publish(const std::string& dir, const rank_report& report,
               const transfer_progress& progress) override {
    upload_rank_files(run_, dir, report, s3_default_part_size, {}, progress);
    for (const auto& f : report.files) std::filesystem::remove(std::filesystem::path(dir) / f.name);
  }
  manifest commit(const std::string&, std::uint64_t step, int world_size,
                  const std::vector<rank_report>& reports, const nlohmann::json& metrics,
                  const nlohmann::json& extra, const attempt_token* token) override {
    return commit_checkpoint_s3(run_, step, world_size, reports, metrics, extra, token);
  }
  std::optional<std::string> local_copy(std::uint64_t) const override { return std::nullopt; }
  retention_result retain(const retention_policy& policy) override {
    return apply_retention_s3(run_, policy);
  }
  std::string publish_export(const std::string& dir, const std::string& name,
                             const transfer_progress& progress) override {
    return upload_directory_s3(run_, dir, name, progress) + " (and " + dir + ")";
  }

 private:
  std::unique_ptr<storage::s3_client> client_;
  s3_run run_;
  std::string cache_dir_;
};

}  // namespace

std::unique_ptr<checkpoint_location> local_checkpoints(std::string run_dir) {
  return std::make_unique<local_location>(std::move(run_dir));
}

std::unique_ptr<checkpoint_location> s3_checkpoints(std::unique_ptr<storage::s3_client> client,
                                                    storage::s3_url run, std::string cache_dir) {
  return std::make_unique<s3_location>(std::move(client), std::move(run), std::move(cache_dir));
}

}  // namespace cohort::core::ckpt
