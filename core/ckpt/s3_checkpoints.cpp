// Checkpoints in S3: rank uploads, the commit, listings, cached verified copies, retention, claims.
#include "core/ckpt/s3_checkpoints.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"

namespace cohort::core::ckpt {
namespace {

namespace fs = std::filesystem;
using storage::s3_error;

std::string checkpoints_key(const s3_run& run) { return run.url.key("checkpoints") + "/"; }
std::string step_key(const s3_run& run, std::uint64_t step) { return checkpoints_key(run) + step_dir_name(step) + "/"; }
std::string url_of(const s3_run& run, const std::string& key) { return "s3://" + run.url.bucket + "/" + key; }
std::string claims_key(const s3_run& run) { return run.url.key("attempts") + "/"; }

const storage::s3_client& client_of(const s3_run& run) {
  if (run.client == nullptr) throw ckpt_error(ckpt_errc::bad_input, run.url.text() + ": no S3 client given");
  return *run.client;
}

// Runs an S3 call, turning its errors into ckpt_error(io) (S3's message names the object).
template <class F>
auto s3_call(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const s3_error& e) {
    throw ckpt_error(ckpt_errc::io, e.what());
  }
}

// A transfer's bytes counted as they move and reported to `progress` (which may be empty); a
// retried request's bytes count again, up to the total.
class transfer_count {
 public:
  transfer_count(const transfer_progress& progress, std::uint64_t total)
      : progress_(progress), total_(total) {
    if (progress_) progress_(0, total_);
  }
  void add(std::uint64_t n) {
    done_ = std::min(total_, done_ + n);
    if (progress_) progress_(done_, total_);
  }

 private:
  const transfer_progress& progress_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
};

void delete_keys(const s3_run& run, std::vector<std::string> keys) {
  // COMMITTED first: a step half deleted is uncommitted, never committed but partial.
  std::stable_partition(keys.begin(), keys.end(), [](const std::string& k) {
    return fs::path(k).filename() == committed_name;
  });
  for (const auto& k : keys) s3_call([&] { client_of(run).delete_object(run.url.bucket, k); });
}

// A checkpoint's score_attribute from its manifest in S3. A missing or unreadable manifest has no
// score (it ranks last); S3 failing to answer is an error, so retention never deletes on a guess.
std::optional<double> s3_score(const s3_run& run, const checkpoint_info& c, const std::string& attribute) {
  const std::string key = step_key(run, c.step) + manifest_name;
  std::string text;
  try {
    text = client_of(run).get_object(run.url.bucket, key);
  } catch (const s3_error& e) {
    if (e.not_found()) return std::nullopt;
    throw ckpt_error(ckpt_errc::io, e.what());
  }
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  try {
    return metric_of(manifest_from_json(j, url_of(run, key)), attribute);
  } catch (const ckpt_error&) {
    return std::nullopt;
  }
}

}  // namespace

std::string s3_step_url(const s3_run& run, std::uint64_t step) {
  return url_of(run, run.url.key("checkpoints/" + step_dir_name(step)));
}

void upload_rank_files(const s3_run& run, const std::string& local_step_dir, const rank_report& report,
                       std::uint64_t part_size,
                       const std::function<void(const std::string&, int)>& after_part,
                       const transfer_progress& progress) {
  check_rank_files(local_step_dir, report.step, report);
  const auto& s3 = client_of(run);
  std::uint64_t total = 0;
  for (const auto& f : report.files) total += f.size;
  transfer_count moved(progress, total);
  for (const auto& f : report.files) {
    const std::string key = step_key(run, report.step) + f.name;
    s3_call([&] {
      s3.upload_file(run.url.bucket, key, (fs::path(local_step_dir) / f.name).string(), part_size,
                     [&](int part, std::uint64_t bytes) {
                       moved.add(bytes);
                       if (after_part) after_part(f.name, part);
                     });
    });
  }
}

std::string upload_directory_s3(const s3_run& run, const std::string& dir, const std::string& name,
                                const transfer_progress& progress, std::uint64_t part_size) {
  const auto& s3 = client_of(run);
  std::vector<fs::path> files;
  std::uint64_t total = 0;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.is_regular_file()) {
      files.push_back(f.path());
      total += f.file_size();
    }
  transfer_count moved(progress, total);
  for (const auto& f : files)
    s3_call([&] {
      s3.upload_file(run.url.bucket, run.url.key(name + "/" + f.filename().string()), f.string(), part_size,
                     [&](int, std::uint64_t bytes) { moved.add(bytes); });
    });
  return run.url.text() + "/" + name;
}

manifest commit_checkpoint_s3(const s3_run& run, std::uint64_t step, int world_size,
                              const std::vector<rank_report>& reports, const nlohmann::json& metrics,
                              const nlohmann::json& extra, const attempt_token* token) {
  const auto& s3 = client_of(run);
  const std::string prefix = step_key(run, step);
  const std::string where = s3_step_url(run, step);
  const std::string what = "the commit of " + step_dir_name(step);
  if (token) check_claim_s3(run, *token, what);  // a zombie is refused as one first (writer.cpp)
  manifest m = merge_reports(where, step, world_size, reports, metrics, extra, [&](const rank_report& r) {
    for (const auto& f : r.files) {
      const auto info = s3_call([&] { return s3.head_object(run.url.bucket, prefix + f.name); });
      if (!info)
        throw ckpt_error(ckpt_errc::missing_file,
                         url_of(run, prefix + f.name) + ": reported by rank " + std::to_string(r.rank) + " but missing");
      if (info->size != f.size)
        throw ckpt_error(ckpt_errc::truncated, url_of(run, prefix + f.name) + ": is " + std::to_string(info->size) +
                                                   " bytes, rank " + std::to_string(r.rank) + " reported " +
                                                   std::to_string(f.size));
    }
  });
  const std::string text = manifest_to_json(m).dump(1);
  if (token) check_claim_s3(run, *token, what);
  s3_call([&] { s3.put_object(run.url.bucket, prefix + manifest_name, text); });
  if (token) check_claim_s3(run, *token, what);
  s3_call([&] { s3.put_object(run.url.bucket, prefix + committed_name, committed_marker(step, text, token)); });
  return m;
}

std::vector<checkpoint_info> scan_checkpoints_s3(const s3_run& run) {
  const std::string root = checkpoints_key(run);
  const auto objects = s3_call([&] { return client_of(run).list_objects(run.url.bucket, root); });
  std::map<std::uint64_t, checkpoint_info> steps;
  for (const auto& o : objects) {
    const std::string rest = o.key.substr(root.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos) continue;
    const auto step = parse_step_dir_name(rest.substr(0, slash));
    if (!step) continue;
    auto& info = steps[*step];
    info.step = *step;
    info.path = s3_step_url(run, *step);
    info.bytes += o.size;
    if (rest.substr(slash + 1) == committed_name) info.committed = true;
  }
  std::vector<checkpoint_info> out;
  for (auto& [step, info] : steps) out.push_back(std::move(info));
  return out;
}

namespace {

// Step `step`'s manifest.json as downloaded into `dir`, parsed; read_manifest checks it against
// COMMITTED once that is there too.
manifest downloaded_manifest(const s3_run& run, std::uint64_t step, const std::string& dir) {
  const std::string where = s3_step_url(run, step) + "/" + manifest_name;
  std::ifstream in(fs::path(dir) / manifest_name, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw ckpt_error(ckpt_errc::bad_manifest, where + ": not JSON");
  return manifest_from_json(j, where);
}

}  // namespace

void download_checkpoint_s3(const s3_run& run, std::uint64_t step, const std::string& local_dir,
                            const transfer_progress& progress, const wanted_file& wanted) {
  const auto& s3 = client_of(run);
  const std::string prefix = step_key(run, step);
  const auto objects = s3_call([&] { return s3.list_objects(run.url.bucket, prefix); });
  const bool committed = std::any_of(objects.begin(), objects.end(),
                                     [&](const auto& o) { return o.key == prefix + committed_name; });
  if (!committed)
    throw ckpt_error(ckpt_errc::not_committed,
                     s3_step_url(run, step) + ": no COMMITTED marker (the checkpoint was never completed; it is ignored)");
  std::error_code ec;
  fs::remove_all(local_dir, ec);
  fs::create_directories(local_dir, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, local_dir + ": cannot create: " + ec.message());
  // The step's own files (the manifest first when only some are wanted: it names them), COMMITTED
  // last.
  std::map<std::string, storage::s3_object_info> listed;
  for (const auto& o : objects) {
    const std::string name = o.key.substr(prefix.size());
    if (!name.empty() && name.find('/') == std::string::npos) listed[name] = o;
  }
  const auto size_of = [&](const std::string& name) {
    const auto it = listed.find(name);
    return it == listed.end() ? std::uint64_t{0} : it->second.size;
  };
  // A large file in ranges, several at once (of the version listed).
  const auto fetch = [&](const std::string& name, transfer_count* moved) {
    storage::s3_object_info object{prefix + name, 0, ""};
    if (const auto it = listed.find(name); it != listed.end()) object = it->second;
    s3_call([&] {
      s3.get_to_file_in_ranges(run.url.bucket, object, (fs::path(local_dir) / name).string(),
                               [&](std::uint64_t n) {
                                 if (moved) moved->add(n);
                               });
    });
  };
  std::vector<std::string> names;
  std::uint64_t total = size_of(committed_name);
  if (wanted) {
    fetch(manifest_name, nullptr);
    const manifest m = downloaded_manifest(run, step, local_dir);
    total += size_of(manifest_name);
    for (const auto& f : m.files)
      if (wanted(m, f)) {
        names.push_back(f.name);
        total += f.size;
      }
  } else {
    for (const auto& [name, object] : listed)
      if (name != committed_name) {
        names.push_back(name);
        total += object.size;
      }
  }
  transfer_count moved(progress, total);
  if (wanted) moved.add(size_of(manifest_name));
  for (const auto& name : names) fetch(name, &moved);
  fetch(committed_name, &moved);
}

latest_result latest_valid_s3(const s3_run& run, const std::string& cache_run_dir) {
  latest_result out;
  const auto all = scan_checkpoints_s3(run);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!it->committed) {
      out.rejected.push_back(
          {it->path, it->path + ": no COMMITTED marker (the checkpoint was never completed; it is ignored)", false});
      continue;
    }
    const std::string local = step_dir(cache_run_dir, it->step);
    std::string reason;
    try {
      download_checkpoint_s3(run, it->step, local);
      verify_result v = verify_checkpoint(local);
      if (v.ok()) {
        out.checkpoint = *it;
        out.checkpoint->path = local;
        out.manifest_read = std::move(v.manifest_read);
        return out;
      }
      for (const auto& p : v.problems) reason += (reason.empty() ? "" : "; ") + p;
    } catch (const ckpt_error& e) {
      reason = e.what();
    }
    out.rejected.push_back({it->path, reason + " (copy checked in " + local + ")", true});
  }
  return out;
}

retention_result apply_retention_s3(const s3_run& run, const retention_policy& policy) {
  check_policy(policy);
  retention_result result;
  const auto objects = s3_call([&] { return client_of(run).list_objects(run.url.bucket, checkpoints_key(run)); });
  const auto all = scan_checkpoints_s3(run);
  auto keys_of = [&](std::uint64_t step) {
    std::vector<std::string> keys;
    for (const auto& o : objects)
      if (o.key.rfind(step_key(run, step), 0) == 0) keys.push_back(o.key);
    return keys;
  };
  std::vector<checkpoint_info> committed;
  for (const auto& c : all) {
    if (c.committed) committed.push_back(c);
    if (remove_incomplete(c, all, policy)) {
      delete_keys(run, keys_of(c.step));
      result.removed_incomplete.push_back(c.path);
    }
  }
  const auto keep = select_kept(committed, policy,
                                [&](const checkpoint_info& c) { return s3_score(run, c, policy.score_attribute); });
  for (const auto& c : committed) {
    if (keep.count(c.step)) {
      result.kept.push_back(c.step);
    } else {
      delete_keys(run, keys_of(c.step));
      result.deleted.push_back(c.step);
    }
  }
  return result;
}

void uncommit_checkpoint_s3(const s3_run& run, std::uint64_t step) {
  s3_call([&] { client_of(run).delete_object(run.url.bucket, step_key(run, step) + committed_name); });
}

void check_claim_s3(const s3_run& run, const attempt_token& token, const std::string& what) {
  check_job_id(token.job_id);
  const std::string prefix = claims_key(run);
  const auto objects = s3_call([&] { return client_of(run).list_objects(run.url.bucket, prefix + token.job_id + "."); });
  std::optional<std::int64_t> newest;
  for (const auto& o : objects) {
    const auto attempt = claim_attempt_of(o.key.substr(prefix.size()), token.job_id);
    if (attempt && (!newest || *attempt > *newest)) newest = attempt;
  }
  refuse_if_stale(token, newest, what, url_of(run, checkpoints_key(run)));
}

void claim_checkpoints_s3(const s3_run& run, const attempt_token& token) {
  check_claim_s3(run, token, "the claim on the checkpoints");
  s3_call([&] {
    client_of(run).put_object(run.url.bucket, claims_key(run) + token.job_id + "." + std::to_string(token.attempt),
                              nlohmann::json{{"job_id", token.job_id}, {"attempt", token.attempt}}.dump());
  });
}

}  // namespace cohort::core::ckpt
