// audit_sample_logs: replay the sampler against what the ranks logged.
#include "core/data/sample_audit.hpp"

#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/data/format.hpp"

namespace cohort::core::data {

namespace {

std::string join(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

std::vector<sample_log_line> read_sample_log(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw data_error("sample log " + path + ": cannot open");
  std::vector<sample_log_line> out;
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    if (text.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(text);
      out.push_back({j.at("attempt").get<int>(), j.at("step").get<std::int64_t>(),
                     j.at("samples").get<std::vector<std::int64_t>>()});
    } catch (const nlohmann::json::exception& e) {
      throw data_error("sample log " + path + " line " + std::to_string(n) + ": not a sample line (" + e.what() + ")");
    }
  }
  return out;
}

sample_audit_result audit_sample_logs(const std::vector<std::vector<sample_log_line>>& logs,
                                      std::int64_t num_samples, const batch_geometry& geometry,
                                      std::uint64_t seed, std::int64_t total_steps) {
  sample_audit_result result;
  const sampler s(num_samples, geometry.global_batch(), seed);
  if (static_cast<std::int64_t>(logs.size()) != geometry.world_size)
    result.errors.push_back("logs of " + std::to_string(logs.size()) + " ranks for a world size of " +
                            std::to_string(geometry.world_size));
  // Per step, every surviving sample of every rank: (sample -> "rank r step k") for the epoch check.
  std::map<std::int64_t, std::map<std::int64_t, std::string>> by_epoch;
  for (std::size_t rank = 0; rank < logs.size(); ++rank) {
    const std::string who = "rank " + std::to_string(rank);
    std::map<std::int64_t, const sample_log_line*> surviving;
    std::vector<std::pair<int, std::int64_t>> resumes;
    int attempt = -1;
    for (const auto& line : logs[rank]) {
      ++result.lines;
      if (line.attempt < attempt) {
        result.errors.push_back(who + ": attempt " + std::to_string(line.attempt) + " logged after attempt " +
                                std::to_string(attempt));
      }
      if (line.attempt != attempt) {
        attempt = line.attempt;
        resumes.emplace_back(attempt, line.step - 1);
      } else if (!surviving.empty() && line.step != surviving.rbegin()->first + 1) {
        result.errors.push_back(who + ", attempt " + std::to_string(attempt) + ": step " + std::to_string(line.step) +
                                " logged after step " + std::to_string(surviving.rbegin()->first));
      }
      const auto from = surviving.lower_bound(line.step);
      result.replaced += static_cast<std::int64_t>(std::distance(from, surviving.end()));
      surviving.erase(from, surviving.end());
      surviving[line.step] = &line;
    }
    result.resumes.push_back(resumes);
    std::int64_t expected = 1;
    for (const auto& [step, line] : surviving) {
      if (step != expected) {
        result.errors.push_back(who + ": step " + std::to_string(expected) + " is missing (next logged: " +
                                std::to_string(step) + ")");
        expected = step;
      }
      ++expected;
      const auto want = s.rank_samples(step - 1, geometry, static_cast<std::int64_t>(rank));
      if (line->samples != want) {
        result.errors.push_back(who + ", step " + std::to_string(step) + " (attempt " + std::to_string(line->attempt) +
                                "): consumed " + join(line->samples) + ", the sampler gives " + join(want));
      }
      auto& seen = by_epoch[(step - 1) / s.steps_per_epoch()];
      for (auto id : line->samples) {
        const std::string where = who + " step " + std::to_string(step);
        const auto [it, fresh] = seen.emplace(id, where);
        if (!fresh)
          result.errors.push_back("sample " + std::to_string(id) + " consumed twice in epoch " +
                                  std::to_string((step - 1) / s.steps_per_epoch() + 1) + ": " + it->second +
                                  " and " + where);
      }
    }
    if (expected != total_steps + 1)
      result.errors.push_back(who + ": logged steps end at " + std::to_string(expected - 1) + ", the job has " +
                              std::to_string(total_steps));
  }
  // Complete epochs: every sample but those the epoch drops was consumed.
  const std::int64_t full = total_steps / s.steps_per_epoch();
  for (std::int64_t e = 0; e < full && result.errors.empty(); ++e) {
    const auto want = s.steps_per_epoch() * s.global_batch();
    if (static_cast<std::int64_t>(by_epoch[e].size()) != want)
      result.errors.push_back("epoch " + std::to_string(e + 1) + ": " + std::to_string(by_epoch[e].size()) +
                              " distinct samples consumed, expected " + std::to_string(want));
  }
  return result;
}

}  // namespace cohort::core::data
