// Vocabulary growth: a weight source whose new vocabulary rows are the old rows' mean.
#include "core/model/vocab_resize.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <torch/torch.h>

#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

// Rows of an old vocabulary weight read at a time for its mean (at most this many elements).
constexpr std::int64_t mean_piece = std::int64_t{16} << 20;

// A vocabulary weight that grew: old_rows rows from the directory, then rows of its mean.
struct grown_weight {
  std::int64_t old_rows = 0, rows = 0, row_len = 1;
  std::once_flag mean_once;
  std::vector<float> mean;  // (row_len), set under mean_once

  // The mean of the old rows, read from `inner` once.
  const std::vector<float>& mean_of(const weight_source& inner, const std::string& name) {
    std::call_once(mean_once, [&] {
      std::vector<double> sum(static_cast<std::size_t>(row_len), 0.0);
      const std::int64_t block = std::max<std::int64_t>(1, mean_piece / row_len);
      auto buffer = torch::empty({std::min(block, old_rows) * row_len}, torch::kFloat);
      for (std::int64_t r = 0; r < old_rows; r += block) {
        const std::int64_t count = std::min(block, old_rows - r);
        auto piece = buffer.narrow(0, 0, count * row_len);
        inner.read(name, r * row_len, piece);
        const float* v = piece.data_ptr<float>();
        for (std::int64_t i = 0; i < count * row_len; ++i) sum[static_cast<std::size_t>(i % row_len)] += v[i];
      }
      mean.resize(sum.size());
      for (std::size_t c = 0; c < sum.size(); ++c) mean[c] = static_cast<float>(sum[c] / static_cast<double>(old_rows));
    });
    return mean;
  }
};

class resized_source final : public weight_source {
 public:
  resized_source(std::unique_ptr<weight_source> inner,
                 std::unordered_map<std::string, std::unique_ptr<grown_weight>> grown)
      : inner_(std::move(inner)), grown_(std::move(grown)) {}

  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    const auto it = grown_.find(name);
    if (it == grown_.end()) {
      inner_->read(name, begin, out);
      return;
    }
    grown_weight& g = *it->second;
    const std::string what = "'" + name + "' grown from " + std::to_string(g.old_rows) + " to " +
                             std::to_string(g.rows) + " rows";
    const std::int64_t n = out.numel(), total = g.rows * g.row_len, old_end = g.old_rows * g.row_len;
    check_read(what, begin, out, total);
    const std::int64_t kept = std::clamp<std::int64_t>(old_end - begin, 0, n);  // from the directory
    if (kept > 0) {
      auto head = out.narrow(0, 0, kept);
      inner_->read(name, begin, head);
    }
    if (kept == n) return;
    const auto& mean = g.mean_of(*inner_, name);
    float* dst = out.data_ptr<float>();
    for (std::int64_t i = kept; i < n; ++i) dst[i] = mean[static_cast<std::size_t>((begin + i) % g.row_len)];
  }

 private:
  std::unique_ptr<weight_source> inner_;
  std::unordered_map<std::string, std::unique_ptr<grown_weight>> grown_;
};

}  // namespace

std::unique_ptr<weight_source> open_resized_hf_weights(const std::string& dir,
                                                       const std::vector<hf_parameter>& params,
                                                       std::int64_t old_vocab) {
  return open_resized_hf_weights(local_hf_files(dir), params, old_vocab);
}

std::unique_ptr<weight_source> open_resized_hf_weights(const hf_files& dir,
                                                       const std::vector<hf_parameter>& params,
                                                       std::int64_t old_vocab) {
  std::vector<hf_parameter> stored = params;  // the directory's shapes
  std::unordered_map<std::string, std::unique_ptr<grown_weight>> grown;
  for (auto& p : stored) {
    if (!is_vocab_parameter(p.name) || p.tensor.dim() < 1 || p.tensor.size(0) == old_vocab) continue;
    const std::int64_t rows = p.tensor.size(0);
    if (rows < old_vocab)
      throw model_error(model_errc::bad_input, dir.where + ": '" + p.name +
                                                   "' of the model being built has " + std::to_string(rows) +
                                                   " rows, fewer than the directory's vocab_size " +
                                                   std::to_string(old_vocab) + "; a vocabulary only grows");
    auto g = std::make_unique<grown_weight>();
    g->old_rows = old_vocab;
    g->rows = rows;
    g->row_len = p.tensor.numel() / rows;
    auto shape = p.tensor.sizes().vec();
    shape[0] = old_vocab;
    p.tensor = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta));
    grown.emplace(p.name, std::move(g));
  }
  auto inner = open_hf_weights(dir, stored);
  if (grown.empty()) return inner;
  return std::make_unique<resized_source>(std::move(inner), std::move(grown));
}

}  // namespace cohort::core::model
