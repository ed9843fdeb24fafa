// Storage roots: `cluster-head --storage-root DIR` (repeatable) confines every path a job names on
// disk (run.storage_path and the run directory under it, data.train, data.eval, model.hf_dir,
// model.config, model.added_tokens; those in S3 are not on disk) to under one of the roots, so that on a
// shared cluster a job cannot make the workers read or write elsewhere. The head checks at submit, on its own
// view of the (shared) file system; no roots means no restriction. Plain functions, no CAF.
//
// Paths are compared in canonical form: symlinks and ".." are resolved. A path that does not exist
// yet (a storage path the first attempt creates) is resolved through its nearest existing
// ancestor, the rest normalized as text: that is where creating it would put it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/job_spec.hpp"

namespace cohort::config {

// The canonical form of the absolute path `path` (see above). Throws spec_error(field, ...) for a
// relative path, or when an existing part cannot be resolved (a dangling symlink, no permission).
std::filesystem::path resolve_through_existing(const std::string& path, const std::string& field);

// True when `path` is `root` or below it, comparing whole components ("/srv/a" is not within
// "/srv/ab"). Both should be canonical.
bool is_within(const std::filesystem::path& path, const std::filesystem::path& root);

// The canonical forms of --storage-root values. Throws std::invalid_argument naming a value that
// is empty, relative, missing or not a directory.
std::vector<std::filesystem::path> canonical_storage_roots(const std::vector<std::string>& roots);

// Throws spec_error naming the field, the path (and what it resolves to, when that differs) and
// the allowed roots, for the first path of `spec` outside every root. Empty `roots`: no checks.
void check_storage_roots(const job_spec& spec, const std::vector<std::filesystem::path>& roots);

}  // namespace cohort::config
