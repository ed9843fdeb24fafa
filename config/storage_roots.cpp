// Confinement of a job's paths to the cluster's storage roots (see storage_roots.hpp).
#include "config/storage_roots.hpp"

#include "config/s3_url.hpp"

#include <algorithm>
#include <stdexcept>

namespace cohort::config {

namespace fs = std::filesystem;

fs::path resolve_through_existing(const std::string& path, const std::string& field) {
  const fs::path p(path);
  if (!p.is_absolute())
    throw spec_error(field, "\"" + path + "\" is relative; on a cluster with storage roots every "
                            "path must be absolute (submit sends them so)");
  // The longest prefix that exists; a symlink counts, even a dangling one (canonical refuses it).
  fs::path existing = p.root_path();
  fs::path rest;
  for (auto it = std::next(p.begin()); it != p.end(); ++it) {
    if (!rest.empty() || it->empty()) {
      rest /= *it;
      continue;
    }
    std::error_code ec;
    const auto st = fs::symlink_status(existing / *it, ec);
    if (st.type() == fs::file_type::not_found) {
      rest /= *it;
      continue;
    }
    if (ec)
      throw spec_error(field, "\"" + path + "\": cannot inspect \"" + (existing / *it).string() +
                                  "\": " + ec.message());
    existing /= *it;
  }
  std::error_code ec;
  const fs::path base = fs::canonical(existing, ec);
  if (ec)
    throw spec_error(field, "\"" + path + "\": cannot resolve \"" + existing.string() +
                                "\" (a dangling symlink?): " + ec.message());
  return rest.empty() ? base : (base / rest).lexically_normal();
}

bool is_within(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
    ++p;
  }
  return true;
}

std::vector<fs::path> canonical_storage_roots(const std::vector<std::string>& roots) {
  std::vector<fs::path> out;
  for (const auto& root : roots) {
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument("--storage-root \"" + root + "\": " + why +
                                   "; give an existing absolute directory on the shared storage");
    };
    if (root.empty() || !fs::path(root).is_absolute()) throw bad("not an absolute path");
    std::error_code ec;
    const fs::path canonical = fs::canonical(root, ec);
    if (ec) throw bad(ec.message());
    if (!fs::is_directory(canonical, ec)) throw bad("not a directory");
    out.push_back(canonical);
  }
  return out;
}

namespace {

std::string describe_roots(const std::vector<fs::path>& roots) {
  std::string s;
  for (const auto& r : roots) s += (s.empty() ? "" : ", ") + r.string();
  return s;
}

void check_one(const std::string& field, const std::string& path, const std::vector<fs::path>& roots,
               const std::string& what = "") {
  if (path.empty()) return;
  const fs::path resolved = resolve_through_existing(path, field);
  if (std::any_of(roots.begin(), roots.end(), [&](const auto& r) { return is_within(resolved, r); }))
    return;
  const std::string shown = what.empty() ? "\"" + path + "\"" : what + " \"" + path + "\"";
  const std::string resolves =
      resolved == fs::path(path) ? "" : " (resolves to \"" + resolved.string() + "\")";
  throw spec_error(field, shown + resolves + " is outside the cluster's storage roots (" +
                              describe_roots(roots) + "); this cluster-head confines job paths "
                              "with --storage-root: give a path under one of them");
}

}  // namespace

void check_storage_roots(const job_spec& spec, const std::vector<fs::path>& roots) {
  if (roots.empty()) return;
  // An s3:// storage path is not on disk; its local directory is.
  if (!is_s3_url(spec.run.storage_path)) {
    check_one("run.storage_path", spec.run.storage_path, roots);
    // What the workers write: <storage_path>/<name> (a name ".." would leave storage_path).
    if (!spec.run.storage_path.empty())
      check_one("name", (fs::path(spec.run.storage_path) / spec.name).string(), roots, "the run directory");
  }
  check_one("run.local_dir", spec.run.local_dir, roots);
  if (!is_s3_url(spec.data.train)) check_one("data.train", spec.data.train, roots);
  check_one("data.cache_dir", spec.data.cache_dir, roots);
  check_one("data.eval", spec.data.eval, roots);
  if (!is_s3_url(spec.model.hf_dir)) check_one("model.hf_dir", spec.model.hf_dir, roots);
  check_one("model.config", spec.model.config_file, roots);
  check_one("model.added_tokens", spec.model.added_tokens, roots);
}

}  // namespace cohort::config
