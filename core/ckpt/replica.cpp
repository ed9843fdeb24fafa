// Peer replicas: where a node keeps them, who keeps whose, their records, and whether one is the
// committed checkpoint's.
#include "core/ckpt/replica.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <system_error>
#include <tuple>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/layout.hpp"
#include "core/data/checksum.hpp"

namespace cohort::core::ckpt {

namespace fs = std::filesystem;

std::string replica_root() {
  if (const char* set = std::getenv("COHORT_REPLICA_DIR"); set != nullptr && *set != '\0') return set;
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) return "/dev/shm/cohort-replicas";
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/cohort-replicas";
}

std::string replica_dir(const std::string& root, const std::string& node, const std::string& job_id,
                        const std::string& run_dir) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(data::xxh64(run_dir.data(), run_dir.size())));
  return root + "/" + node + "/" + job_id + "-" + hash;
}

std::string replica_step_dir(const std::string& dir, std::uint64_t step) {
  return dir + "/" + step_dir_name(step);
}

std::string replica_record_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.replica.json", rank);
  return name;
}

std::vector<int> choose_buddies(const std::vector<std::string>& node_of_rank) {
  const int w = static_cast<int>(node_of_rank.size());
  for (int k = 1; k < w; ++k) {
    bool apart = true;
    for (int r = 0; r < w && apart; ++r) apart = node_of_rank[r] != node_of_rank[(r + k) % w];
    if (!apart) continue;
    std::vector<int> buddy(w);
    for (int r = 0; r < w; ++r) buddy[r] = (r + k) % w;
    return buddy;
  }
  return {};
}

nlohmann::json replica_record_to_json(const replica_record& r) {
  auto files = nlohmann::json::array();
  for (const auto& f : r.files) files.push_back({{"name", f.name}, {"size", f.size}, {"xxh64", f.xxh64}});
  return {{"step", r.step}, {"rank", r.rank}, {"world_size", r.world_size}, {"files", files}};
}

replica_record replica_record_from_json(const nlohmann::json& j) {
  try {
    replica_record r;
    r.step = j.at("step").get<std::uint64_t>();
    r.rank = j.at("rank").get<int>();
    r.world_size = j.at("world_size").get<int>();
    for (const auto& f : j.at("files"))
      r.files.push_back({f.at("name").get<std::string>(), r.rank, f.at("size").get<std::uint64_t>(),
                         f.at("xxh64").get<std::uint64_t>()});
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw ckpt_error(ckpt_errc::bad_input, std::string("replica record: ") + e.what());
  }
}

void write_replica_record(const std::string& dir, const replica_record& r) {
  write_file_durable(dir + "/" + replica_record_name(r.rank), replica_record_to_json(r).dump());
}

std::vector<replica_record> scan_replicas(const std::string& dir) {
  std::vector<replica_record> out;
  std::error_code ec;
  for (const auto& step : fs::directory_iterator(dir, ec)) {
    if (!parse_step_dir_name(step.path().filename().string())) continue;
    for (const auto& file : fs::directory_iterator(step.path(), ec)) {
      const std::string name = file.path().filename().string();
      if (name.size() < 13 || name.compare(name.size() - 13, 13, ".replica.json") != 0) continue;
      try {
        out.push_back(replica_record_from_json(nlohmann::json::parse(read_small_file(file.path().string()))));
      } catch (const std::exception&) {
        // a damaged record: that replica does not count
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return std::tie(a.step, a.rank) < std::tie(b.step, b.rank); });
  return out;
}

void drop_replicas(const std::string& dir, std::uint64_t keep, std::uint64_t keep_too) {
  std::error_code ec;
  for (const auto& step : fs::directory_iterator(dir, ec)) {
    const auto n = parse_step_dir_name(step.path().filename().string());
    if (n && *n != keep && *n != keep_too) fs::remove_all(step.path(), ec);
  }
}

std::string mismatched_files(const std::string& dir, const manifest& m, int rank) {
  bool listed = false;
  std::error_code ec;
  for (const auto& f : m.files) {
    if (f.rank != rank) continue;
    listed = true;
    const std::string path = dir + "/" + f.name;
    if (!fs::exists(path, ec)) return "damaged: " + path + " is missing";
    const auto d = digest_file(path);
    if (d.size != f.size || d.xxh64 != f.xxh64)
      return "damaged: " + path + " does not match the manifest of step " + std::to_string(m.step) + " (" +
             std::to_string(d.size) + " bytes, the manifest says " + std::to_string(f.size) +
             (d.size == f.size ? "; another checksum" : "") + ")";
  }
  if (!listed)
    return "the manifest of step " + std::to_string(m.step) + " lists no file of rank " +
           std::to_string(rank);
  return "";
}

std::string check_replica(const std::string& step_dir, const manifest& m, int rank) {
  const std::string record_path = step_dir + "/" + replica_record_name(rank);
  std::error_code ec;
  if (!fs::exists(record_path, ec)) return "no replica of rank " + std::to_string(rank) + " in " + step_dir;
  replica_record r;
  try {
    r = replica_record_from_json(nlohmann::json::parse(read_small_file(record_path)));
  } catch (const std::exception& e) {
    return record_path + " is damaged: " + e.what();
  }
  if (r.step != m.step || r.world_size != m.world_size || r.rank != rank)
    return "stale: " + record_path + " is of step " + std::to_string(r.step) + " of " +
           std::to_string(r.world_size) + " ranks, the committed checkpoint is step " +
           std::to_string(m.step) + " of " + std::to_string(m.world_size);
  return mismatched_files(step_dir, m, rank);
}

void write_replica_manifest(const std::string& step_dir, const manifest& m, int rank) {
  const std::string path = step_dir + "/" + manifest_name;
  const std::string own = path + ".rank-" + std::to_string(rank);
  write_file_durable(own, manifest_to_json(m).dump(1));
  std::error_code ec;
  fs::rename(own, path, ec);  // the same text from every rank of the node: the last rename wins
  if (ec)
    throw ckpt_error(ckpt_errc::io, "replica: cannot rename " + own + " to " + path + ": " + ec.message());
}

manifest read_replica_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/" + manifest_name;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw ckpt_error(ckpt_errc::bad_manifest, path + ": " + e.what());
  }
  return manifest_from_json(j, path);
}

std::vector<std::uint64_t> replica_steps_after(const std::vector<std::vector<replica_record>>& held,
                                               std::uint64_t after, int world_size) {
  std::vector<std::uint64_t> steps;
  for (const auto& node : held)
    for (const auto& r : node)
      if (r.step > after && r.world_size == world_size) steps.push_back(r.step);
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

std::vector<int> plan_sources(const std::vector<std::vector<replica_record>>& held, std::uint64_t step,
                              int world_size) {
  std::vector<int> sources(static_cast<std::size_t>(world_size), -1);
  for (int h = 0; h < static_cast<int>(held.size()); ++h) {
    for (const auto& r : held[h]) {
      if (r.step != step || r.world_size != world_size || r.rank < 0 || r.rank >= world_size) continue;
      auto& s = sources[static_cast<std::size_t>(r.rank)];
      if (s == -1 || h == r.rank) s = h;  // its own node's copy first, else the lowest holder
    }
  }
  return sources;
}

}  // namespace cohort::core::ckpt
