// Weight sources: slices of a Hugging Face directory's safetensors, or of a seeded initialisation.
#include "core/model/weight_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <utility>

#include <ATen/Parallel.h>
#include <torch/utils.h>

#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"

namespace cohort::core::model {
namespace {

// F16/BF16 ranges are converted through a staging buffer of at most this many elements.
constexpr std::int64_t convert_piece = std::int64_t{8} << 20;
// fill_parameter reads at most this many fp32 elements at a time.
constexpr std::int64_t fill_piece = std::int64_t{16} << 20;

std::string range_text(std::int64_t begin, std::int64_t count) {
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")";
}

class hf_source final : public weight_source {
 public:
  hf_source(std::string dir, hf_weight_files files, const std::vector<hf_parameter>& expected)
      : dir_(std::move(dir)), files_(std::move(files)) {
    for (std::size_t i = 0; i < expected.size(); ++i) {
      tensors_.emplace(expected[i].name, std::make_pair(&files_.tensors[i], expected[i].tensor.numel()));
    }
  }
  hf_source(const hf_source&) = delete;  // tensors_ points into files_
  hf_source& operator=(const hf_source&) = delete;

  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      throw model_error(model_errc::bad_input,
                        dir_ + ": no weight named '" + name + "' among the " +
                            std::to_string(tensors_.size()) + " this model expects");
    }
    const hf_tensor_file& t = *it->second.first;
    check_read(t.reader->path() + ": tensor '" + t.entry->name + "'", begin, out, it->second.second);
    const std::int64_t n = out.numel();
    if (n == 0) return;
    const auto elem = static_cast<std::uint64_t>(c10::elementSize(t.dtype));
    const auto byte = [&](std::int64_t i) { return static_cast<std::uint64_t>(i) * elem; };
    if (t.dtype == torch::kFloat) {  // straight into out, one pread
      t.reader->read_range(*t.entry, byte(begin), byte(n), out.data_ptr());
      return;
    }
    torch::NoGradGuard no_grad;
    auto staging = torch::empty({std::min(n, convert_piece)}, torch::TensorOptions().dtype(t.dtype));
    for (std::int64_t done = 0; done < n;) {
      const std::int64_t k = std::min(n - done, convert_piece);
      t.reader->read_range(*t.entry, byte(begin + done), byte(k), staging.data_ptr());
      out.narrow(0, done, k).copy_(staging.narrow(0, 0, k));
      done += k;
    }
  }

 private:
  std::string dir_;
  hf_weight_files files_;
  // name -> (where it is stored, its element count)
  std::unordered_map<std::string, std::pair<const hf_tensor_file*, std::int64_t>> tensors_;
};

}  // namespace

void check_read(const std::string& what, std::int64_t begin, const torch::Tensor& out, std::int64_t numel) {
  if (!out.defined() || out.dim() != 1 || out.scalar_type() != torch::kFloat ||
      !out.device().is_cpu() || !out.is_contiguous()) {
    throw model_error(model_errc::bad_input,
                      what + ": read() needs a 1-D contiguous fp32 CPU tensor to fill");
  }
  const std::int64_t n = out.numel();
  if (begin < 0 || begin > numel || n > numel - begin) {
    throw model_error(model_errc::bad_input,
                      what + ": elements " + range_text(begin, n) + " run past its " +
                          std::to_string(numel) + " elements");
  }
}

namespace {

// --- seeded initialisation ---

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class init_kind { normal, ones, zeros };

struct init_param {
  init_kind kind = init_kind::normal;
  std::int64_t numel = 0;
  std::uint64_t key = 0;  // of the parameter; each chunk's key mixes in its index
  std::int64_t zero_begin = 0, zero_end = 0;  // flat elements forced to 0 (the padding row)
};

// Box-Muller with its logarithm and sine/cosine as polynomials of +, *, / and sqrt only (errors
// below 1e-8, far under float's rounding): IEEE makes each value the same whether the compiler
// vectorises the loop or not and on every CPU (this file is built with -ffp-contract=off), and
// the loop vectorises, unlike calls into libm.
//
// The normal pair (r cos t, r sin t) of two 24-bit draws: u1 = (high + 1) / 2^24 in (0, 1],
// t = 2 pi low / 2^24; r = sqrt(-2 ln u1) * scale.
inline void box_muller(std::uint32_t high, std::uint32_t low, float scale, float& a, float& b) {
  constexpr float ln2 = 0.693147180559945309f;
  constexpr float sqrt_half = 0.707106781186547524f;
  constexpr float quarter_turn = 1.57079632679489662f / 4194304.0f;  // (pi/2) / 2^22
  constexpr float eighth_turn = 0.785398163397448310f;              // pi/4
  // ln(k / 2^24) for k in [1, 2^24]: k = m 2^e with m in [sqrt(1/2), sqrt(2)), then
  // ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172: five terms of the series.
  const float k = static_cast<float>(static_cast<std::int32_t>(high + 1));  // exact: <= 2^24
  std::uint32_t bits;
  std::memcpy(&bits, &k, sizeof bits);
  std::int32_t e = static_cast<std::int32_t>(bits >> 23) - 127;  // k = m 2^e, m in [1, 2)
  bits = (bits & 0x7FFFFFu) | 0x3F800000u;
  float m;
  std::memcpy(&m, &bits, sizeof m);
  const bool above = m > 1.41421356237309505f;
  m = above ? m * 0.5f : m;
  e = above ? e + 1 : e;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float ln_m = 2.0f * s *
                     (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9)))));
  const float ln_u1 = static_cast<float>(e - 24) * ln2 + ln_m;
  const float r = std::sqrt(-2.0f * ln_u1) * scale;
  // t = q pi/2 + x, x in [0, pi/2): sin/cos of y = x - pi/4 in [-pi/4, pi/4) by Taylor series.
  const std::uint32_t q = low >> 22;
  const float y = static_cast<float>(low & 0x3FFFFFu) * quarter_turn - eighth_turn;
  const float y2 = y * y;
  // Nested Horner forms of y - y^3/3! + ... - y^11/11! and 1 - y^2/2! + ... + y^12/12!.
  const float sin_y =
      y * (1.0f - y2 * (1.0f / 6) *
                      (1.0f - y2 * (1.0f / 20) *
                                  (1.0f - y2 * (1.0f / 42) *
                                              (1.0f - y2 * (1.0f / 72) * (1.0f - y2 * (1.0f / 110))))));
  const float cos_y =
      1.0f - y2 * 0.5f *
                 (1.0f - y2 * (1.0f / 12) *
                             (1.0f - y2 * (1.0f / 30) *
                                         (1.0f - y2 * (1.0f / 56) *
                                                     (1.0f - y2 * (1.0f / 90) *
                                                                 (1.0f - y2 * (1.0f / 132))))));
  const float sin_x = (sin_y + cos_y) * sqrt_half, cos_x = (cos_y - sin_y) * sqrt_half;
  // Quadrant q: (cos t, sin t) = (cos x, sin x), (-sin x, cos x), (-cos x, -sin x), (sin x, -cos x);
  // the signs flip by xor on the sign bit, so the loop has no branches and vectorises.
  const bool odd = (q & 1u) != 0;
  float cos_t = odd ? sin_x : cos_x, sin_t = odd ? cos_x : sin_x;
  std::uint32_t cos_bits, sin_bits;
  std::memcpy(&cos_bits, &cos_t, sizeof cos_bits);
  std::memcpy(&sin_bits, &sin_t, sizeof sin_bits);
  cos_bits ^= ((q + 1u) & 2u) << 30;  // negative in quadrants 1 and 2
  sin_bits ^= (q & 2u) << 30;         // negative in quadrants 2 and 3
  std::memcpy(&cos_t, &cos_bits, sizeof cos_t);
  std::memcpy(&sin_t, &sin_bits, sizeof sin_t);
  a = r * cos_t;
  b = r * sin_t;
}

// Elements [j0, j1) of a chunk with key `key` into dst[0, j1 - j0): elements 2p and 2p + 1 are
// the normal pair of the chunk's p-th splitmix64 output z (bits 40..63 and 16..39), so each
// depends only on (key, index). Pairs go in blocks: the 64-bit hashes one by one, then the float
// math over the whole block, which the compiler vectorises.
void normal_chunk(std::uint64_t key, std::int64_t j0, std::int64_t j1, float scale, float* dst) {
  constexpr std::int64_t block = 64;  // pairs
  std::uint32_t high[block], low[block];
  float a[block], b[block];
  for (std::int64_t p0 = j0 >> 1; 2 * p0 < j1; p0 += block) {
    for (std::int64_t i = 0; i < block; ++i) {
      const std::uint64_t z =
          splitmix64(key + static_cast<std::uint64_t>(p0 + i) * 0x9E3779B97F4A7C15ull);
      high[i] = static_cast<std::uint32_t>(z >> 40);
      low[i] = static_cast<std::uint32_t>(z >> 16) & 0xFFFFFFu;
    }
    for (std::int64_t i = 0; i < block; ++i) box_muller(high[i], low[i], scale, a[i], b[i]);
    const std::int64_t first = std::max(j0, 2 * p0), last = std::min(j1, 2 * (p0 + block));
    for (std::int64_t j = first; j < last; ++j) {
      const std::int64_t i = (j >> 1) - p0;
      dst[j - j0] = (j & 1) == 0 ? a[i] : b[i];
    }
  }
}

class seeded_source final : public weight_source {
 public:
  seeded_source(const model_config& config, const std::vector<hf_parameter>& params,
                std::uint64_t seed)
      : scale_(static_cast<float>(config.initializer_range)) {
    for (const auto& p : params) {
      init_param ip;
      ip.numel = p.tensor.numel();
      ip.key = splitmix64(splitmix64(seed) ^ fnv1a(p.name));
      const std::int64_t dim = p.tensor.dim();
      if (ends_with(p.name, ".bias")) {
        ip.kind = init_kind::zeros;
      } else if (ends_with(p.name, ".weight") && dim == 1) {
        ip.kind = init_kind::ones;  // LayerNorm / RMSNorm
      } else if (ends_with(p.name, ".weight") && dim == 2) {
        ip.kind = init_kind::normal;  // linear maps, embeddings, lm_head
        const bool token_embedding = ends_with(p.name, "embed_tokens.weight") ||
                                     ends_with(p.name, "wte.weight");
        if (token_embedding && config.pad_token_id && has_embedding_padding_idx(config.fam)) {
          const std::int64_t row = *config.pad_token_id, rows = p.tensor.size(0);
          if (row < 0 || row >= rows) {
            throw model_error(model_errc::bad_input,
                              "seeded_init: pad_token_id " + std::to_string(row) +
                                  " is outside the " + std::to_string(rows) + " rows of '" +
                                  p.name + "'");
          }
          ip.zero_begin = row * p.tensor.size(1);
          ip.zero_end = ip.zero_begin + p.tensor.size(1);
        }
      } else {
        throw model_error(model_errc::bad_input,
                          "seeded_init: cannot initialise '" + p.name + "' of " +
                              std::to_string(dim) +
                              " dimensions (known: 2-D .weight normal, 1-D .weight ones, .bias zeros)");
      }
      if (!params_.emplace(p.name, ip).second) {
        throw model_error(model_errc::bad_input, "seeded_init: parameter '" + p.name + "' listed twice");
      }
    }
  }

  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    const auto it = params_.find(name);
    if (it == params_.end()) {
      throw model_error(model_errc::bad_input,
                        "seeded_init: no parameter named '" + name + "' among the " +
                            std::to_string(params_.size()) + " of this model");
    }
    const init_param& p = it->second;
    check_read("seeded_init: parameter '" + name + "'", begin, out, p.numel);
    const std::int64_t n = out.numel();
    if (n == 0) return;
    torch::NoGradGuard no_grad;
    if (p.kind != init_kind::normal) {
      out.fill_(p.kind == init_kind::ones ? 1.0 : 0.0);
      return;
    }
    float* dst = out.data_ptr<float>();
    // Elements are independent, so any split over threads gives the same values.
    at::parallel_for(begin, begin + n, std::int64_t{1} << 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e;) {
        const std::int64_t c = i / seeded_init_chunk;
        const std::int64_t chunk_end = std::min(e, (c + 1) * seeded_init_chunk);
        const std::uint64_t key = splitmix64(p.key ^ splitmix64(static_cast<std::uint64_t>(c)));
        normal_chunk(key, i - c * seeded_init_chunk, chunk_end - c * seeded_init_chunk, scale_,
                     dst + (i - begin));
        i = chunk_end;
      }
    });
    const std::int64_t z0 = std::max(begin, p.zero_begin), z1 = std::min(begin + n, p.zero_end);
    if (z0 < z1) std::fill(dst + (z0 - begin), dst + (z1 - begin), 0.0f);
  }

 private:
  float scale_;
  std::unordered_map<std::string, init_param> params_;
};

// LoRA adapters: A uniform in ±1/√in (kaiming_uniform_ with a = √5, as peft initialises them),
// element i of adapter `name` from the 24 top bits of splitmix64(key(seed, name) + i·φ); B zeros.
class lora_source final : public weight_source {
 public:
  lora_source(const std::vector<hf_parameter>& params, std::uint64_t seed) {
    for (const auto& p : params) {
      lora_param lp;
      lp.numel = p.tensor.numel();
      lp.key = splitmix64(splitmix64(seed) ^ fnv1a(p.name));
      if (ends_with(p.name, ".lora_A.weight") && p.tensor.dim() == 2) {
        lp.bound = 1.0f / std::sqrt(static_cast<float>(p.tensor.size(1)));
      } else if (!(ends_with(p.name, ".lora_B.weight") && p.tensor.dim() == 2)) {
        throw model_error(model_errc::bad_input, "lora_init: '" + p.name +
                                                     "' is not a 2-D .lora_A.weight or .lora_B.weight");
      }
      if (!params_.emplace(p.name, lp).second)
        throw model_error(model_errc::bad_input, "lora_init: parameter '" + p.name + "' listed twice");
    }
  }

  void read(const std::string& name, std::int64_t begin, torch::Tensor& out) const override {
    const auto it = params_.find(name);
    if (it == params_.end())
      throw model_error(model_errc::bad_input, "lora_init: no adapter named '" + name + "' among the " +
                                                   std::to_string(params_.size()) + " of this model");
    const lora_param& p = it->second;
    check_read("lora_init: adapter '" + name + "'", begin, out, p.numel);
    torch::NoGradGuard no_grad;
    if (p.bound == 0) {
      out.zero_();
      return;
    }
    float* dst = out.data_ptr<float>();
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const std::uint64_t z = splitmix64(p.key + static_cast<std::uint64_t>(begin + i) * 0x9E3779B97F4A7C15ull);
      const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      dst[i] = (2.0f * u - 1.0f) * p.bound;
    }
  }

 private:
  struct lora_param {
    std::int64_t numel = 0;
    std::uint64_t key = 0;
    float bound = 0;  // 0: B, zeros
  };
  std::unordered_map<std::string, lora_param> params_;
};

}  // namespace

std::unique_ptr<weight_source> lora_init(const std::vector<hf_parameter>& adapters, std::uint64_t seed) {
  return std::make_unique<lora_source>(adapters, seed);
}

std::unique_ptr<weight_source> open_hf_weights(const hf_files& dir,
                                               const std::vector<hf_parameter>& expected) {
  auto files = open_hf_weight_files(dir, expected, "the model being built");
  return std::make_unique<hf_source>(dir.where, std::move(files), expected);
}

std::unique_ptr<weight_source> open_hf_weights(const std::string& dir,
                                               const std::vector<hf_parameter>& expected) {
  return open_hf_weights(local_hf_files(dir), expected);
}

std::unique_ptr<weight_source> seeded_init(const model_config& config,
                                           const std::vector<hf_parameter>& params,
                                           std::uint64_t seed) {
  return std::make_unique<seeded_source>(config, params, seed);
}

void fill_parameter(const weight_source& source, const std::string& name, torch::Tensor& dst) {
  if (!dst.defined() || !dst.is_contiguous()) {
    throw model_error(model_errc::bad_input,
                      "fill_parameter: '" + name + "' must be filled into a defined, contiguous tensor");
  }
  torch::NoGradGuard no_grad;
  const std::int64_t n = dst.numel();
  auto flat = dst.view({n});
  const bool direct = dst.scalar_type() == torch::kFloat && dst.device().is_cpu();
  torch::Tensor staging;
  if (!direct) staging = torch::empty({std::min(n, fill_piece)}, torch::kFloat);
  for (std::int64_t done = 0; done < n;) {
    const std::int64_t k = std::min(n - done, fill_piece);
    auto target = flat.narrow(0, done, k);
    if (direct) {
      source.read(name, done, target);
    } else {
      auto piece = staging.narrow(0, 0, k);
      source.read(name, done, piece);
      target.copy_(piece);
    }
    done += k;
  }
}

}  // namespace cohort::core::model
