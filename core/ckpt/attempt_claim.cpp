// Attempt claims on a run directory's checkpoints (see attempt_claim.hpp).
#include "core/ckpt/attempt_claim.hpp"

#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"

namespace cohort::core::ckpt {

namespace {

namespace fs = std::filesystem;

// Beside checkpoints/, which holds only step directories.
fs::path claims_dir(const std::string& run_dir) { return fs::path(run_dir) / "attempts"; }

}  // namespace

void check_job_id(const std::string& job_id) {
  if (job_id.empty() || job_id.find('/') != std::string::npos || job_id[0] == '.')
    throw ckpt_error(ckpt_errc::bad_input,
                     "attempt claim: job id \"" + job_id + "\" cannot name a file (non-empty, no '/', not starting with '.')");
}

std::optional<std::int64_t> claim_attempt_of(const std::string& name, const std::string& job_id) {
  const std::string prefix = job_id + ".";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const auto number = name.substr(prefix.size());
  if (number.find_first_not_of("0123456789") != std::string::npos || number.size() > 18) return std::nullopt;
  return std::stoll(number);
}

void refuse_if_stale(const attempt_token& token, std::optional<std::int64_t> newest, const std::string& what,
                     const std::string& where) {
  if (newest && *newest > token.attempt)
    throw ckpt_error(ckpt_errc::stale_attempt,
                     "refused " + what + " by attempt " + std::to_string(token.attempt + 1) + " of job " +
                         token.job_id + ": it is a zombie, attempt " + std::to_string(*newest + 1) +
                         " has started since and owns the job's checkpoints in " + where);
}

std::optional<std::int64_t> newest_claim(const std::string& run_dir, const std::string& job_id) {
  check_job_id(job_id);
  const auto dir = claims_dir(run_dir);
  std::optional<std::int64_t> newest;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return newest;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto attempt = claim_attempt_of(it->path().filename().string(), job_id);
    if (attempt && (!newest || *attempt > *newest)) newest = attempt;
  }
  if (ec) throw ckpt_error(ckpt_errc::io, dir.string() + ": cannot list: " + ec.message());
  return newest;
}

void check_claim(const std::string& run_dir, const attempt_token& token, const std::string& what) {
  refuse_if_stale(token, newest_claim(run_dir, token.job_id), what, checkpoints_dir(run_dir));
}

void claim_checkpoints(const std::string& run_dir, const attempt_token& token) {
  check_claim(run_dir, token, "the claim on the checkpoints");
  const auto dir = claims_dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, dir.string() + ": cannot create: " + ec.message());
  write_file_durable((dir / (token.job_id + "." + std::to_string(token.attempt))).string(),
                     nlohmann::json{{"job_id", token.job_id}, {"attempt", token.attempt}}.dump());
  fsync_path(dir.string());
}

}  // namespace cohort::core::ckpt
