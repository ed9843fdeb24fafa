// Which attempt of a job may commit checkpoints into its run directory. Each attempt's rank 0
// claims the job's checkpoints when it starts (claim_checkpoints: the file
// <run>/attempts/<job_id>.<attempt>, made durably); a commit carries its attempt's
// token and is refused (ckpt_error stale_attempt) once a newer attempt of the same job has
// claimed: a zombie attempt, still running after the head started a newer one (a partitioned
// node, a trainer the head gave up on), cannot commit over the newer attempt's checkpoints.
// Remaining race, stated honestly: the check reads the claims just before the manifest and again
// just before COMMITTED is written, so a commit that passed the last check right before a newer
// attempt claimed may still land (a window of one file write; the new attempt has by then chosen
// where it resumes from, so it is not affected).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort::core::ckpt {

struct attempt_token {
  std::string job_id;        // the head's job id: claims of other jobs do not count
  std::int64_t attempt = 0;  // 0-based, as the head numbers attempts
};

// Records that `token`'s attempt owns the job's checkpoints from now on. Throws
// ckpt_error(stale_attempt) when a newer attempt of the job already claimed (this attempt is
// itself a zombie), ckpt_error(bad_input) for a job id that cannot name a file, ckpt_error(io).
void claim_checkpoints(const std::string& run_dir, const attempt_token& token);
// The newest attempt of `job_id` that claimed the run directory's checkpoints; nullopt: none.
std::optional<std::int64_t> newest_claim(const std::string& run_dir, const std::string& job_id);
// Throws ckpt_error(stale_attempt) naming both attempts when a newer attempt of the job claimed
// than `token`'s; `what` names what was refused ("commit of step-00000004").
void check_claim(const std::string& run_dir, const attempt_token& token, const std::string& what);

// Shared with the S3 claims (s3_checkpoints.hpp): check_job_id throws ckpt_error(bad_input) for a
// job id that cannot name a file; claim_attempt_of gives the attempt a claim's file name
// "<job_id>.<attempt>" records (nullopt: another job's, or not a claim); refuse_if_stale throws
// ckpt_error(stale_attempt) when `newest` is newer than the token's attempt, naming `where`.
void check_job_id(const std::string& job_id);
std::optional<std::int64_t> claim_attempt_of(const std::string& name, const std::string& job_id);
void refuse_if_stale(const attempt_token& token, std::optional<std::int64_t> newest, const std::string& what,
                     const std::string& where);

}  // namespace cohort::core::ckpt
