// Test helper: writes a W-rank checkpoint of made-up flat buffers in a ZeRO-like layout (each
// rank packs its even slice of "params" and "moments" into one stored tensor "flat"; "step_count"
// is replicated on every rank) and commits it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/ckpt/reshard.hpp"
#include "core/ckpt/writer.hpp"

namespace cohort::core::ckpt::testing {

inline constexpr std::uint64_t params_numel = 11;
inline constexpr std::uint64_t moments_numel = 7;

// The logical bytes of each tensor at a step (distinct per step).
inline std::vector<float> logical_values(std::uint64_t numel, float base) {
  std::vector<float> v(numel);
  for (std::uint64_t i = 0; i < numel; ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return v;
}
inline std::vector<float> params_at(std::uint64_t step) { return logical_values(params_numel, 100.0f * step); }
inline std::vector<float> moments_at(std::uint64_t step) { return logical_values(moments_numel, -7.0f * step - 1); }

inline rank_report write_fake_rank(const std::string& dir, std::uint64_t step, int world, int rank) {
  const auto params = params_at(step);
  const auto moments = moments_at(step);
  const flat_range p = even_partition(params_numel, world, rank);
  const flat_range m = even_partition(moments_numel, world, rank);
  std::vector<float> flat(params.begin() + static_cast<std::ptrdiff_t>(p.offset),
                          params.begin() + static_cast<std::ptrdiff_t>(p.offset + p.length));
  flat.insert(flat.end(), moments.begin() + static_cast<std::ptrdiff_t>(m.offset),
              moments.begin() + static_cast<std::ptrdiff_t>(m.offset + m.length));
  const std::int64_t step_count = static_cast<std::int64_t>(step);
  std::vector<shard_tensor> tensors;
  tensors.push_back({"flat", "F32", {static_cast<std::int64_t>(flat.size())}, flat.data(), flat.size() * 4,
                     {{"params", {static_cast<std::int64_t>(params_numel)}, p.offset, p.length, 0},
                      {"moments", {static_cast<std::int64_t>(moments_numel)}, m.offset, m.length, p.length}}});
  tensors.push_back({"step_count", "I64", {1}, &step_count, 8, {}});
  rank_state state;
  state.step = step;
  state.scheduler = {{"lr", 0.001 * static_cast<double>(step)}};
  state.rng = std::string("rng\0state", 9) + std::to_string(rank);
  state.sampler = {{"position", step * 8}};
  return write_rank_shard(dir, rank, tensors, state);
}

inline manifest write_fake_checkpoint(const std::string& dir, std::uint64_t step, int world,
                                      const nlohmann::json& metrics = nlohmann::json::object()) {
  std::vector<rank_report> reports;
  for (int r = 0; r < world; ++r) reports.push_back(write_fake_rank(dir, step, world, r));
  return commit_checkpoint(dir, step, world, reports, metrics);
}

}  // namespace cohort::core::ckpt::testing
