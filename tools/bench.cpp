// cohort-bench's cluster-free parts: node counts, run specs, run measurements, the CSV (see bench.hpp).
#include "tools/bench.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/train/memory_report.hpp"

namespace cohort::tools {
namespace {

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

template <class T>
std::string cell(const std::optional<T>& v) {
  if (!v) return "";
  if constexpr (std::is_floating_point_v<T>) return bench_csv_number(*v);
  else return std::to_string(*v);
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += "\"\"";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out + "\"";
}

}  // namespace

std::vector<int> parse_node_counts(const std::string& text, std::size_t nodes) {
  const std::string allowed = "allowed: a comma-separated list of node counts from 1 to " +
                              std::to_string(nodes) + " (the node list's length), e.g. 1,2,4";
  std::vector<int> counts;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    long count = 0;
    try {
      count = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || count < 1 || count > static_cast<long>(nodes))
      throw config::spec_error("--counts", "got \"" + item + "\" in \"" + text + "\"; " + allowed);
    counts.push_back(static_cast<int>(count));
  }
  if (counts.empty() || text.back() == ',') throw config::spec_error("--counts", "got \"" + text + "\"; " + allowed);
  return counts;
}

std::vector<int> default_node_counts(std::size_t nodes) {
  std::vector<int> counts;
  for (std::size_t n = 1; n < nodes; n *= 2) counts.push_back(static_cast<int>(n));
  counts.push_back(static_cast<int>(nodes));
  return counts;
}

node_groups make_node_groups(const std::vector<config::host_entry>& hosts, int group_size) {
  if (group_size < 1 || static_cast<std::size_t>(group_size) > hosts.size())
    throw config::spec_error("--group-size", "got " + std::to_string(group_size) + "; allowed: 1 to " +
                                                 std::to_string(hosts.size()) + " (the node list's length)");
  node_groups out;
  const std::size_t whole =
      hosts.size() / static_cast<std::size_t>(group_size) * static_cast<std::size_t>(group_size);
  for (std::size_t i = 0; i < whole; i += static_cast<std::size_t>(group_size))
    out.groups.emplace_back(hosts.begin() + static_cast<std::ptrdiff_t>(i),
                            hosts.begin() + static_cast<std::ptrdiff_t>(i) + group_size);
  out.left_over.assign(hosts.begin() + static_cast<std::ptrdiff_t>(whole), hosts.end());
  return out;
}

config::job_spec bench_spec(const config::job_spec& base, const std::vector<config::host_entry>& hosts,
                            int count, const std::string& name, double memory_every_s) {
  config::job_spec spec = base;
  spec.name = name;
  spec.scaling.nodes.clear();
  spec.scaling.num_workers = 0;
  for (int i = 0; i < count; ++i) {
    spec.scaling.nodes.push_back(hosts.at(static_cast<std::size_t>(i)).name);
    spec.scaling.num_workers += hosts[static_cast<std::size_t>(i)].slots;
  }
  spec.scaling.min_workers = 0;
  if (spec.scaling.strategy != config::placement_strategy::strict_spread)
    spec.scaling.strategy = config::placement_strategy::spread;
  if (spec.run.memory_status_every_s <= 0) spec.run.memory_status_every_s = memory_every_s;
  return spec;
}

namespace {

// "<base><suffix>", the base cut so that the whole stays within 120 characters, "-2", "-3", ...
// appended while <storage_path>/<name> exists.
std::string unused_run_name(const std::string& base, const std::string& suffix,
                            const std::string& storage_path) {
  const std::string stem = base.substr(0, 120 - std::min<std::size_t>(120, suffix.size())) + suffix;
  std::string name = stem;
  for (int n = 2; std::filesystem::exists(std::filesystem::path(storage_path) / name); ++n)
    name = stem + "-" + std::to_string(n);
  return name;
}

}  // namespace

std::string bench_run_name(const std::string& base, int count, const std::string& stamp,
                           const std::string& storage_path) {
  return unused_run_name(base, "-" + std::to_string(count) + "n-" + stamp, storage_path);
}

std::string bench_group_run_name(const std::string& base, int group, int count, const std::string& stamp,
                                 const std::string& storage_path) {
  return unused_run_name(base, "-g" + std::to_string(group) + "-" + std::to_string(count) + "n-" + stamp,
                         storage_path);
}

run_throughput read_run_throughput(const std::string& run_dir, std::int64_t global_batch,
                                   std::int64_t warmup_steps) {
  const std::string path = run_dir + "/metrics.jsonl";
  run_throughput out;
  std::ifstream in(path);
  if (!in) return out;
  std::vector<double> samples, tokens, mfu;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
      throw bench_error(path + ":" + std::to_string(line_no) + ": not a logged step's JSON object with a \"step\"");
    if (j["step"].get<std::int64_t>() <= warmup_steps) continue;
    ++out.steps;
    if (j.contains("step_s") && j["step_s"].is_number() && j["step_s"].get<double>() > 0)
      samples.push_back(static_cast<double>(global_batch) / j["step_s"].get<double>());
    if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) tokens.push_back(j["tokens_per_s"].get<double>());
    if (j.contains("mfu") && j["mfu"].is_number()) mfu.push_back(j["mfu"].get<double>());
  }
  out.samples_per_s = median(samples);
  out.tokens_per_s = median(tokens);
  out.mfu = median(mfu);
  return out;
}

memory_peaks read_run_memory_peaks(const std::string& run_dir) {
  memory_peaks out;
  if (!std::filesystem::is_directory(run_dir + "/memory")) return out;
  std::map<int, core::train::rank_memory_summary> ranks;
  try {
    ranks = core::train::read_run_memory(run_dir);
  } catch (const core::train::memory_report_error& e) {
    throw bench_error(e.what());
  }
  for (const auto& [rank, m] : ranks) {
    out.host_bytes = std::max(out.host_bytes.value_or(0), m.rss.peak);
    if (m.gpu_allocated) out.gpu_bytes = std::max(out.gpu_bytes.value_or(0), m.gpu_allocated->peak);
  }
  return out;
}

const char* to_string(run_status s) {
  switch (s) {
    case run_status::ok: return "ok";
    case run_status::failed: return "failed";
    case run_status::timeout: return "timeout";
  }
  return "failed";
}

bool bench_row::passed() const {
  return status == run_status::ok && throughput.samples_per_s && *throughput.samples_per_s >= min_samples_per_s;
}

std::string bench_csv_number(double v) {
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

const char* const bench_csv_header =
    "nodes,workers,job,run,status,steps,samples_per_s,tokens_per_s,mfu,peak_host_bytes,peak_gpu_bytes,"
    "min_samples_per_s,pass,reason,group,node_names";

std::string bench_csv_line(const bench_row& r) {
  const std::string names = [&] {
    std::string text;
    for (const auto& n : r.node_names) text += (text.empty() ? "" : " ") + n;
    return text;
  }();
  return std::to_string(r.nodes) + "," + std::to_string(r.workers) + "," + r.job_id + "," + r.run_name + "," +
         to_string(r.status) + "," + std::to_string(r.throughput.steps) + "," +
         cell(r.throughput.samples_per_s) + "," + cell(r.throughput.tokens_per_s) + "," +
         cell(r.throughput.mfu) + "," + cell(r.memory.host_bytes) + "," + cell(r.memory.gpu_bytes) + "," +
         bench_csv_number(r.min_samples_per_s) + "," + (r.passed() ? "pass" : "fail") + "," +
         quoted(r.reason) + "," + (r.group > 0 ? std::to_string(r.group) : "") + "," + quoted(names);
}

std::ofstream open_bench_csv(const std::string& path) {
  std::string first;
  bool exists = false;
  {
    std::ifstream in(path);
    exists = static_cast<bool>(in);
    if (exists) std::getline(in, first);
  }
  if (exists && !first.empty() && first != bench_csv_header)
    throw config::spec_error(path, std::string("its first line is not cohort-bench's header (") + bench_csv_header +
                                       "); give --csv a new file or one an earlier cohort-bench wrote");
  std::ofstream out(path, std::ios::app);
  if (!out) throw bench_error(path + ": cannot open the CSV for writing; check the directory exists and is writable");
  if (first.empty()) out << bench_csv_header << '\n' << std::flush;
  return out;
}

}  // namespace cohort::tools
