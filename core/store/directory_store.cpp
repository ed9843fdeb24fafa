// The directory backend of the cluster store (see directory_store.hpp).
#include "core/store/directory_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "core/store/atomic_file.hpp"
#include "core/store/job_ids.hpp"
#include "core/store/jsonl_file.hpp"
#include "core/store/posix_io.hpp"
#include "core/store/record_checks.hpp"
#include "core/store/store_error.hpp"
#include "core/store/store_paths.hpp"

namespace cohort::core::store {

namespace fs = std::filesystem;

namespace {

// Names of the entries of `dir` that do not start with '.' (temp files); empty if it is missing.
std::vector<std::string> visible_entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!name.empty() && name[0] != '.') names.push_back(name);
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw store_error(store_error_kind::io, dir.string(),
                      "cannot list " + dir.string() + ": " + ec.message());
  return names;
}

fs::path logs_path(const fs::path& job_dir) { return job_dir / "logs.jsonl"; }
fs::path rotated_logs_path(const fs::path& job_dir) { return job_dir / "logs.1.jsonl"; }

}  // namespace

directory_store::directory_store(fs::path dir, store_options options, clock_ms now)
    : dir_(std::move(dir)), options_(options), now_(now), lease_(dir_, std::move(now)) {
  if (options_.log_line_cap_bytes == 0 || options_.log_file_cap_bytes == 0)
    throw store_error(store_error_kind::invalid, dir_.string(),
                      "store_options: log_line_cap_bytes and log_file_cap_bytes must be > 0");
  ensure_dir(jobs_dir(dir_));
  ensure_dir(nodes_dir(dir_));
}

void directory_store::check_epoch(std::int64_t epoch) const {
  auto current = lease_.current();
  std::int64_t current_epoch = current ? current->epoch : 0;
  if (epoch < current_epoch)
    throw store_error(store_error_kind::fenced, leader_path(dir_).string(),
                      "write with epoch " + std::to_string(epoch) + " refused: head '" +
                          current->head_id + "' (" + current->address + ") holds epoch " +
                          std::to_string(current_epoch) + " of " + dir_.string() +
                          "; this head lost the lease and must stop writing");
  if (epoch > current_epoch)
    throw store_error(store_error_kind::invalid, leader_path(dir_).string(),
                      "write with epoch " + std::to_string(epoch) +
                          " refused: no head ever "
                          "claimed it (current epoch of " +
                          dir_.string() + " is " + std::to_string(current_epoch) +
                          "); take the lease first");
}

fs::path directory_store::existing_job_dir(const std::string& job_id) const {
  check_name("job id", job_id);
  auto dir = jobs_dir(dir_) / job_id;
  std::error_code ec;
  if (!fs::exists(dir / "spec.json", ec))
    throw store_error(store_error_kind::not_found, dir.string(),
                      "no job '" + job_id + "' in " + jobs_dir(dir_).string());
  return dir;
}

namespace {

void require_spec_object(const std::string& spec_json) {
  auto spec = nlohmann::json::parse(spec_json, nullptr, false);
  if (spec.is_discarded() || !spec.is_object())
    throw store_error(store_error_kind::invalid, "",
                      "job spec must be a JSON object (the text as submitted)");
}

}  // namespace

std::string directory_store::reserve_job_id(std::int64_t epoch) {
  job_id_lock lock(dir_);
  check_epoch(epoch);
  auto id = lock.take_next();
  lock.commit();
  return id;
}

void directory_store::create_reserved_job(std::int64_t epoch, const std::string& job_id,
                                          const std::string& spec_json) {
  require_spec_object(spec_json);
  check_name("job id", job_id);
  const auto dir = jobs_dir(dir_) / job_id;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw store_error(store_error_kind::invalid, dir.string(),
                      "job id '" + job_id + "' was not reserved in " + jobs_dir(dir_).string());
  if (fs::exists(dir / "spec.json", ec))
    throw store_error(store_error_kind::invalid, (dir / "spec.json").string(),
                      "job '" + job_id + "' has a spec already; a reserved id takes one job");
  check_epoch(epoch);
  write_file_atomic(dir / "spec.json", spec_json);
}

std::string directory_store::create_job(std::int64_t epoch, const std::string& spec_json) {
  require_spec_object(spec_json);
  job_id_lock lock(dir_);
  check_epoch(epoch);
  auto id = lock.take_next();
  write_file_atomic(jobs_dir(dir_) / id / "spec.json", spec_json);
  lock.commit();
  return id;
}

void directory_store::write_state(std::int64_t epoch, const std::string& job_id,
                                const nlohmann::json& state) {
  require_object("job state", state);
  auto dir = existing_job_dir(job_id);
  check_epoch(epoch);
  auto stored = state;
  stored["epoch"] = epoch;
  write_json_atomic(dir / "state.json", stored);
}

void directory_store::append_event(std::int64_t epoch, const std::string& job_id,
                                 nlohmann::json event) {
  require_object("job event", event);
  auto dir = existing_job_dir(job_id);
  check_epoch(epoch);
  if (!event.contains("ts")) event["ts"] = now_();
  event["epoch"] = epoch;
  append_json_lines(dir / "events.jsonl", {event}, true);
}

std::int64_t directory_store::next_log_seq(const std::string& job_id, const fs::path& dir) {
  auto it = last_log_seq_.find(job_id);
  if (it == last_log_seq_.end()) {
    std::int64_t last = 0;
    for (const auto& path : {logs_path(dir), rotated_logs_path(dir)}) {
      auto line = last_json_line(path);
      if (line && line->contains("seq") && (*line)["seq"].is_number_integer()) {
        last = (*line)["seq"].get<std::int64_t>();
        break;
      }
    }
    it = last_log_seq_.emplace(job_id, last).first;
  }
  return ++it->second;
}

void directory_store::append_logs(std::int64_t epoch, const std::string& job_id,
                                std::vector<nlohmann::json> lines) {
  for (const auto& line : lines) require_object("log line", line);
  auto dir = existing_job_dir(job_id);
  check_epoch(epoch);
  if (lines.empty()) return;
  for (auto& line : lines) {
    line["seq"] = next_log_seq(job_id, dir);
    if (!line.contains("ts")) line["ts"] = now_();
    auto text = line.find("line");
    if (text != line.end() && text->is_string() &&
        text->get_ref<const std::string&>().size() > options_.log_line_cap_bytes) {
      cut_utf8(text->get_ref<std::string&>(), options_.log_line_cap_bytes);
      line["truncated"] = true;
    }
  }
  auto size = append_json_lines(logs_path(dir), lines, false);
  if (size > options_.log_file_cap_bytes) {
    if (::rename(logs_path(dir).c_str(), rotated_logs_path(dir).c_str()) != 0)
      throw_errno("cannot rotate", logs_path(dir));
  }
}

std::optional<stored_job> directory_store::load_job(const std::string& job_id) const {
  check_name("job id", job_id);
  auto dir = jobs_dir(dir_) / job_id;
  auto spec = read_file(dir / "spec.json");
  if (!spec) return std::nullopt;
  stored_job job{job_id, *spec, read_json(dir / "state.json")};
  if (job.state && !job.state->is_object())
    throw store_error(store_error_kind::corrupt, (dir / "state.json").string(),
                      (dir / "state.json").string() +
                          " must hold a JSON object (the job record); it was damaged or edited");
  return job;
}

std::vector<stored_job> directory_store::list_jobs() const {
  auto names = visible_entries(jobs_dir(dir_));
  std::sort(names.begin(), names.end(), job_id_less);
  std::vector<stored_job> jobs;
  for (const auto& name : names) {
    auto job = load_job(name);
    if (job) jobs.push_back(std::move(*job));
  }
  return jobs;
}

std::vector<nlohmann::json> directory_store::read_events(const std::string& job_id) const {
  return read_json_lines(existing_job_dir(job_id) / "events.jsonl");
}

std::vector<nlohmann::json> directory_store::read_logs(const std::string& job_id,
                                                     std::int64_t after_seq) const {
  auto dir = existing_job_dir(job_id);
  std::vector<nlohmann::json> out;
  for (const auto& path : {rotated_logs_path(dir), logs_path(dir)}) {
    for (auto& line : read_json_lines(path)) {
      auto seq = line.find("seq");
      if (seq != line.end() && seq->is_number_integer() && seq->get<std::int64_t>() > after_seq)
        out.push_back(std::move(line));
    }
  }
  return out;
}

void directory_store::write_node(std::int64_t epoch, const std::string& name,
                               const nlohmann::json& node) {
  check_name("node name", name);
  require_object("node record", node);
  check_epoch(epoch);
  auto stored = node;
  stored["epoch"] = epoch;
  stored["updated_at"] = now_();
  write_json_atomic(nodes_dir(dir_) / (name + ".json"), stored);
}

void directory_store::remove_node(std::int64_t epoch, const std::string& name) {
  check_name("node name", name);
  check_epoch(epoch);
  auto path = nodes_dir(dir_) / (name + ".json");
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return;
    throw_errno("cannot remove", path);
  }
  fsync_dir(nodes_dir(dir_));
}

std::vector<nlohmann::json> directory_store::list_nodes() const {
  auto names = visible_entries(nodes_dir(dir_));
  std::sort(names.begin(), names.end());
  std::vector<nlohmann::json> nodes;
  for (const auto& name : names) {
    const std::string suffix = ".json";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    auto path = nodes_dir(dir_) / name;
    auto node = read_json(path);
    if (!node) continue;  // removed while listing
    if (!node->is_object())
      throw store_error(store_error_kind::corrupt, path.string(),
                        path.string() + " must hold a JSON object (a node record)");
    nodes.push_back(std::move(*node));
  }
  return nodes;
}

}  // namespace cohort::core::store
