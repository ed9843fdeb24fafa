// read_run_memory and compare_memory: the memory CSVs of runs, summed up and side by side.
#include "core/train/memory_report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/train/memory_status.hpp"

namespace cohort::core::train {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells(1);
  for (const char c : line) {
    if (c == ',') cells.emplace_back();
    else cells.back() += c;
  }
  return cells;
}

struct accumulator {
  std::int64_t peak = 0;
  double sum = 0;
  std::int64_t count = 0;
  memory_figure figure() const { return {peak, count ? sum / static_cast<double>(count) : 0.0}; }
};

// One rank's samples summed up (see rank_memory_summary).
rank_memory_summary summarize(const std::vector<memory_sample>& samples) {
  accumulator rss, gpu_alloc, gpu_reserved;
  rank_memory_summary out;
  std::int64_t gpu_rows = 0;
  for (const auto& s : samples) {
    rss.peak = std::max({rss.peak, s.rss_peak_bytes, s.rss_bytes});
    rss.sum += static_cast<double>(s.rss_bytes);
    ++rss.count;
    if (s.gpu) {
      gpu_alloc.peak = std::max({gpu_alloc.peak, s.gpu->peak_bytes, s.gpu->allocated_bytes});
      gpu_alloc.sum += static_cast<double>(s.gpu->allocated_bytes);
      ++gpu_alloc.count;
      gpu_reserved.peak = std::max(gpu_reserved.peak, s.gpu->reserved_bytes);
      gpu_reserved.sum += static_cast<double>(s.gpu->reserved_bytes);
      ++gpu_reserved.count;
      ++gpu_rows;
    }
    ++out.samples;
  }
  out.rss = rss.figure();
  if (gpu_rows > 0) {
    out.gpu_allocated = gpu_alloc.figure();
    out.gpu_reserved = gpu_reserved.figure();
  }
  return out;
}

std::string mib(const std::optional<memory_figure>& f, bool peak) {
  if (!f) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", (peak ? static_cast<double>(f->peak) : f->mean) / (1024.0 * 1024.0));
  return buf;
}

nlohmann::json figure_json(const std::optional<memory_figure>& f) {
  if (!f) return nullptr;
  return {{"peak_bytes", f->peak}, {"mean_bytes", f->mean}};
}

nlohmann::json rank_json(const std::map<int, rank_memory_summary>& run, int rank) {
  const auto it = run.find(rank);
  if (it == run.end()) return nullptr;
  const auto& r = it->second;
  return {{"samples", r.samples},
          {"rss", figure_json(r.rss)},
          {"gpu_allocated", figure_json(r.gpu_allocated)},
          {"gpu_reserved", figure_json(r.gpu_reserved)}};
}

}  // namespace

std::vector<memory_sample> read_memory_samples(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw memory_report_error(path + ": cannot be read");
  std::string line;
  if (!std::getline(in, line) || line != memory_csv_header)
    throw memory_report_error(path + ":1: expected the header \"" + std::string(memory_csv_header) + "\"");
  std::vector<memory_sample> samples;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const auto cells = split_csv(line);
    if (cells.size() != 7)
      throw memory_report_error(where + "expected 7 comma-separated columns (" + memory_csv_header + "), got " +
                                std::to_string(cells.size()));
    auto number_at = [&](std::size_t i, bool integer) {
      const std::string& c = cells[i];
      char* end = nullptr;
      const double v = integer ? static_cast<double>(std::strtoll(c.c_str(), &end, 10)) : std::strtod(c.c_str(), &end);
      if (c.empty() || end != c.c_str() + c.size() || v < 0)
        throw memory_report_error(where + "column " + std::to_string(i + 1) + " (" + split_csv(memory_csv_header)[i] +
                                  ") is \"" + c + "\", expected a number >= 0");
      return v;
    };
    memory_sample s;
    s.wall_time = number_at(0, false);
    s.step = static_cast<std::int64_t>(number_at(1, true));
    s.rss_bytes = static_cast<std::int64_t>(number_at(2, true));
    s.rss_peak_bytes = static_cast<std::int64_t>(number_at(3, true));
    const int gpu_cells = !cells[4].empty() + !cells[5].empty() + !cells[6].empty();
    if (gpu_cells == 3) {
      s.gpu = memory_sample::gpu_bytes{static_cast<std::int64_t>(number_at(4, true)),
                                       static_cast<std::int64_t>(number_at(5, true)),
                                       static_cast<std::int64_t>(number_at(6, true))};
    } else if (gpu_cells != 0) {
      throw memory_report_error(where + "the GPU columns (5-7) must be all given or all empty");
    }
    samples.push_back(s);
  }
  return samples;
}

std::map<int, std::vector<memory_sample>> read_run_memory_samples(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) throw memory_report_error(run_dir + ": no such run directory");
  const std::string dir = run_dir + "/memory";
  if (!fs::is_directory(dir, ec))
    throw memory_report_error(dir + ": no such directory (was the run started with run.memory_status_every_s > 0?)");
  std::map<int, std::vector<memory_sample>> ranks;
  const std::regex name("rank-([0-9]{1,6})\\.csv");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) ranks[std::stoi(m[1].str())] = read_memory_samples(entry.path().string());
  }
  if (ec) throw memory_report_error(dir + ": cannot be listed: " + ec.message());
  if (ranks.empty()) throw memory_report_error(dir + ": holds no rank-N.csv file");
  return ranks;
}

std::map<int, rank_memory_summary> read_run_memory(const std::string& run_dir) {
  std::map<int, rank_memory_summary> ranks;
  for (const auto& [rank, samples] : read_run_memory_samples(run_dir)) ranks[rank] = summarize(samples);
  return ranks;
}

std::string compare_memory(const std::string& run_a, const std::string& run_b, bool as_json) {
  const auto a = read_run_memory(run_a);
  const auto b = read_run_memory(run_b);
  std::vector<int> ranks;
  for (const auto& [r, _] : a) ranks.push_back(r);
  for (const auto& [r, _] : b)
    if (!a.count(r)) ranks.push_back(r);
  std::sort(ranks.begin(), ranks.end());
  if (as_json) {
    nlohmann::json out{{"a", run_a}, {"b", run_b}, {"ranks", nlohmann::json::array()}};
    for (const int r : ranks) out["ranks"].push_back({{"rank", r}, {"a", rank_json(a, r)}, {"b", rank_json(b, r)}});
    return out.dump(2) + "\n";
  }
  std::string text = "A: " + run_a + "\nB: " + run_b + "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-5s %-14s %12s %12s %12s %12s\n", "rank", "MiB", "A peak", "A mean", "B peak",
                "B mean");
  text += line;
  for (const int r : ranks) {
    const auto ia = a.find(r), ib = b.find(r);
    const rank_memory_summary* ra = ia == a.end() ? nullptr : &ia->second;
    const rank_memory_summary* rb = ib == b.end() ? nullptr : &ib->second;
    using getter = std::optional<memory_figure> (*)(const rank_memory_summary&);
    const std::pair<const char*, getter> rows[] = {
        {"rss", [](const rank_memory_summary& m) { return std::optional<memory_figure>(m.rss); }},
        {"gpu_allocated", [](const rank_memory_summary& m) { return m.gpu_allocated; }},
        {"gpu_reserved", [](const rank_memory_summary& m) { return m.gpu_reserved; }}};
    for (const auto& [label, get] : rows) {
      const auto fa = ra ? get(*ra) : std::nullopt;
      const auto fb = rb ? get(*rb) : std::nullopt;
      std::snprintf(line, sizeof line, "%-5d %-14s %12s %12s %12s %12s\n", r, label, mib(fa, true).c_str(),
                    mib(fa, false).c_str(), mib(fb, true).c_str(), mib(fb, false).c_str());
      text += line;
    }
  }
  return text;
}

}  // namespace cohort::core::train
