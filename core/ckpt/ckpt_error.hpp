// The error type of cohort::core::ckpt: what is wrong with a checkpoint (not committed, a file
// missing, truncated or corrupted, a manifest that cannot be read) or with a caller's request.
#pragma once

#include <stdexcept>
#include <string>

namespace cohort::core::ckpt {

enum class ckpt_errc {
  bad_input,          // a caller's argument is out of range (rank, world size, tensor name, ...)
  io,                 // a syscall on a checkpoint file failed
  not_committed,      // the directory has no COMMITTED marker
  missing_file,       // a file the manifest lists is not there
  truncated,          // a file is shorter (or longer) than the manifest says
  checksum_mismatch,  // a file's XXH64 differs from the manifest's
  bad_manifest,       // manifest.json / COMMITTED / rank-*.json unreadable or inconsistent
  no_checkpoint,      // no committed, valid checkpoint exists
  stale_attempt,      // a zombie attempt: a newer attempt of the job claimed its checkpoints
};

class ckpt_error : public std::runtime_error {
 public:
  ckpt_error(ckpt_errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ckpt_errc code() const noexcept { return code_; }

 private:
  ckpt_errc code_;
};

}  // namespace cohort::core::ckpt
