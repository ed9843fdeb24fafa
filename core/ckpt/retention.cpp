// Choosing which checkpoints survive and deleting the rest.
#include "core/ckpt/retention.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/reader.hpp"

namespace cohort::core::ckpt {
namespace {

void remove_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw ckpt_error(ckpt_errc::io, path + ": cannot remove: " + ec.message());
}

}  // namespace

void check_policy(const retention_policy& policy) {
  if (policy.num_to_keep < 0) {
    throw ckpt_error(ckpt_errc::bad_input, "retention: num_to_keep must be >= 0 (0 keeps all), got " +
                                               std::to_string(policy.num_to_keep));
  }
  if (policy.score_order != "max" && policy.score_order != "min") {
    throw ckpt_error(ckpt_errc::bad_input, "retention: score_order must be 'max' or 'min', got '" + policy.score_order + "'");
  }
}

bool remove_incomplete(const checkpoint_info& c, const std::vector<checkpoint_info>& all,
                       const retention_policy& policy) {
  if (c.committed || policy.protect_steps.count(c.step)) return false;
  std::optional<std::uint64_t> newest;
  for (const auto& o : all)
    if (o.committed) newest = o.step;
  return !policy.writer_running || (newest && c.step < *newest);
}

std::set<std::uint64_t> select_kept(const std::vector<checkpoint_info>& committed, const retention_policy& policy,
                                    const std::function<std::optional<double>(const checkpoint_info&)>& score) {
  std::set<std::uint64_t> keep;
  if (policy.num_to_keep == 0) {
    for (const auto& c : committed) keep.insert(c.step);
  } else if (!committed.empty()) {
    keep.insert(committed.back().step);
    for (const auto& c : committed) {
      if (policy.protect_steps.count(c.step)) keep.insert(c.step);
    }
    // Rank the rest best first: by score (missing scores last, ties to the newer), or newest.
    std::vector<std::pair<std::optional<double>, std::uint64_t>> ranked;
    for (const auto& c : committed) {
      if (keep.count(c.step)) continue;
      ranked.emplace_back(policy.score_attribute.empty() ? std::nullopt : score(c), c.step);
    }
    const bool maximise = policy.score_order == "max";
    std::sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
      if (a.first && *a.first != *b.first) return maximise ? *a.first > *b.first : *a.first < *b.first;
      return a.second > b.second;
    });
    for (const auto& r : ranked) {
      if (keep.size() >= static_cast<std::size_t>(policy.num_to_keep)) break;
      keep.insert(r.second);
    }
  }
  return keep;
}

std::optional<double> metric_of(const manifest& m, const std::string& attribute) {
  auto it = m.metrics.find(attribute);
  if (it == m.metrics.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

retention_result apply_retention(const std::string& run_dir, const retention_policy& policy) {
  check_policy(policy);
  retention_result result;
  const auto all = scan_checkpoints(run_dir);
  std::vector<checkpoint_info> committed;
  for (const auto& c : all) {
    if (c.committed) committed.push_back(c);
  }
  for (const auto& c : all) {
    if (remove_incomplete(c, all, policy)) {
      remove_dir(c.path);
      result.removed_incomplete.push_back(c.path);
    }
  }
  const auto keep = select_kept(committed, policy, [&](const checkpoint_info& c) -> std::optional<double> {
    try {
      return metric_of(read_manifest(c.path), policy.score_attribute);
    } catch (const ckpt_error&) {
      return std::nullopt;  // an unreadable manifest has no score: it ranks last
    }
  });
  for (const auto& c : committed) {
    if (keep.count(c.step)) {
      result.kept.push_back(c.step);
    } else {
      remove_dir(c.path);
      result.deleted.push_back(c.step);
    }
  }
  return result;
}

}  // namespace cohort::core::ckpt
