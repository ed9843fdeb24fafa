// GEMMs through cuBLASLt with each shape's algorithm picked by timing (gemm.hpp), ATen elsewhere.
#include "core/model/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/model/torch_compat.hpp"

#ifdef COHORT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#endif

namespace cohort::core::model::gemm {
namespace {

std::atomic<int> shapes_timed{0}, shapes_replaced{0};
std::atomic<bool> timed_picks_on{false};
std::atomic<bool> own_gemm_on{false};
std::atomic<bool> own_gemm_rotary_on{true};

void check_operands(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate,
                    const torch::Tensor& bias) {
  if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2 || a.size(1) != b.size(0) || out.size(0) != a.size(0) ||
      out.size(1) != b.size(1)) {
    throw std::invalid_argument("gemm::mm_into: out (M, N) = a (M, K) · b (K, N), given out " +
                                c10::str(out.sizes()) + ", a " + c10::str(a.sizes()) + ", b " +
                                c10::str(b.sizes()));
  }
  if (bias.defined() && (accumulate || bias.dim() != 1 || bias.size(0) != out.size(1))) {
    throw std::invalid_argument("gemm::mm_into: a bias is (N), " + c10::str(out.size(1)) +
                                " here, and comes without accumulate");
  }
}

void aten_mm_into(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate,
                  const torch::Tensor& bias) {
  torch::Tensor o = out;
  if (bias.defined()) {
    at::addmm_out(o, bias, a, b);
  } else {
    compat::matmul_into(o, a, b, accumulate);
  }
}

#ifdef COHORT_WITH_CUDA

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("gemm: ") + what + ": " + cublasLtGetStatusString(status));
  }
}

// A 2-D tensor's memory as cuBLAS (column-major) stores it: op(stored) is the tensor transposed,
// which is what C' = op(B') op(A') needs of both operands when out (M, N) is C' (N × M).
struct operand {
  cublasOperation_t op;
  std::int64_t rows, cols, ld;  // of the stored matrix
};

std::optional<operand> column_major(const torch::Tensor& t) {
  if (t.stride(1) == 1 && t.stride(0) >= std::max<std::int64_t>(1, t.size(1)))
    return operand{CUBLAS_OP_N, t.size(1), t.size(0), t.stride(0)};  // rows contiguous: tᵀ stored
  if (t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(1, t.size(0)))
    return operand{CUBLAS_OP_T, t.size(0), t.size(1), t.stride(1)};  // a transposed view: t stored
  return std::nullopt;
}

std::optional<cudaDataType_t> cuda_type(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16:
      return CUDA_R_16BF;
    case torch::kHalf:
      return CUDA_R_16F;
    case torch::kFloat:
      return CUDA_R_32F;
    default:
      return std::nullopt;
  }
}

std::uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// One product's descriptors, destroyed with it.
struct plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  plan() = default;
  plan(const plan&) = delete;
  plan& operator=(const plan&) = delete;
  ~plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// What cuBLASLt is given for out = a b [+ bias] [+ out]: A' is b's memory, B' is a's.
struct launch {
  operand first, second;  // b's and a's
  cudaDataType_t in_type, out_type;
  std::int64_t ldc;
  const void* first_ptr;
  const void* second_ptr;
  void* out_ptr;
  const void* bias_ptr;
  float beta;
  std::uint32_t first_aligned, second_aligned, out_aligned;  // bytes (alignment())
  std::vector<std::int64_t> key;  // the shape as the cache knows it
};

std::optional<launch> describe(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                               bool accumulate, const torch::Tensor& bias) {
  if (!out.is_cuda() || a.device() != out.device() || b.device() != out.device()) return std::nullopt;
  if (a.scalar_type() != b.scalar_type() ||
      (a.scalar_type() != torch::kBFloat16 && a.scalar_type() != torch::kHalf))
    return std::nullopt;
  if (out.scalar_type() != a.scalar_type() && out.scalar_type() != torch::kFloat) return std::nullopt;
  if (out.numel() == 0 || a.size(1) == 0) return std::nullopt;
  if (out.stride(1) != 1 || out.stride(0) < std::max<std::int64_t>(1, out.size(1))) return std::nullopt;
  if (bias.defined() &&
      (!bias.is_contiguous() || bias.scalar_type() != out.scalar_type() || bias.device() != out.device()))
    return std::nullopt;
  const auto first = column_major(b), second = column_major(a);
  if (!first || !second) return std::nullopt;
  launch l{*first,
           *second,
           *cuda_type(a.scalar_type()),
           *cuda_type(out.scalar_type()),
           out.stride(0),
           b.data_ptr(),
           a.data_ptr(),
           out.data_ptr(),
           bias.defined() ? bias.data_ptr() : nullptr,
           accumulate ? 1.0f : 0.0f,
           alignment(b.data_ptr()),
           alignment(a.data_ptr()),
           alignment(out.data_ptr()),
           {}};
  l.key = {out.get_device(),
           first->op,
           second->op,
           out.size(1),
           out.size(0),
           a.size(1),
           first->ld,
           second->ld,
           l.ldc,
           l.in_type,
           l.out_type,
           accumulate ? 1 : 0,
           bias.defined() ? 1 : 0,
           l.first_aligned,
           l.second_aligned,
           l.out_aligned,
           bias.defined() ? alignment(l.bias_ptr) : 0};
  return l;
}

void make_plan(plan& p, const launch& l) {
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &l.first.op, sizeof(l.first.op)),
        "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &l.second.op, sizeof(l.second.op)),
        "transb");
  if (l.bias_ptr != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "epilogue");
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &l.bias_ptr,
                                         sizeof(l.bias_ptr)),
          "bias");
  }
  check(cublasLtMatrixLayoutCreate(&p.a, l.in_type, l.first.rows, l.first.cols, l.first.ld), "layout of b");
  check(cublasLtMatrixLayoutCreate(&p.b, l.in_type, l.second.rows, l.second.cols, l.second.ld),
        "layout of a");
  // C' (N × M): N rows, as many as op(A') has.
  const auto n = l.first.op == CUBLAS_OP_N ? l.first.rows : l.first.cols;
  const auto m = l.second.op == CUBLAS_OP_N ? l.second.cols : l.second.rows;
  check(cublasLtMatrixLayoutCreate(&p.c, l.out_type, n, m, l.ldc), "layout of out");
}

// One of cuBLASLt's algorithms for a product, and whether it is given torch's workspace. Given
// one, most of the algorithms an H200 is offered take 4 bytes of it for a counter that cuBLASLt
// zeroes with a memset before each product (in a captured step graph, a node and about 2 µs of
// idle apiece); run without a workspace the same algorithm is another kernel, with no counter.
struct candidate {
  cublasLtMatmulAlgo_t algo;
  bool workspace;
};

cublasStatus_t run(const plan& p, const launch& l, const candidate& c, void* out_ptr, cudaStream_t stream) {
  const float alpha = 1.0f;
  return cublasLtMatmul(at::cuda::getCurrentCUDABlasLtHandle(), p.op, &alpha, l.first_ptr, p.a, l.second_ptr,
                        p.b, &l.beta, out_ptr, p.c, out_ptr, p.c, &c.algo,
                        c.workspace ? at::cuda::getCUDABlasLtWorkspace() : nullptr,
                        c.workspace ? at::cuda::getCUDABlasLtWorkspaceSize() : 0, stream);
}

// Event pairs around runs on one stream, read once the last has passed.
class stopwatch {
 public:
  explicit stopwatch(cudaStream_t stream) : stream_(stream) {}
  stopwatch(const stopwatch&) = delete;
  stopwatch& operator=(const stopwatch&) = delete;
  ~stopwatch() {
    for (auto e : events_) cudaEventDestroy(e);
  }
  std::size_t mark() {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) throw std::runtime_error("gemm: cudaEventCreate failed");
    events_.push_back(e);
    cudaEventRecord(e, stream_);
    return events_.size() - 1;
  }
  // Milliseconds from mark `from` to mark `to`; waits for `to`.
  float ms(std::size_t from, std::size_t to) {
    cudaEventSynchronize(events_[to]);
    float t = 0;
    cudaEventElapsedTime(&t, events_[from], events_[to]);
    return t;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

// The index of the candidate for l to keep, from runs in turns: a warm-up of about 50 ms of the
// first, then rounds in which each candidate runs about 1 ms; a candidate's figure is the median
// of its rounds. The first (the heuristic's) stays unless another's figure is 2% below its own.
// With beta 1 the runs write a scratch copy of out, not out.
std::size_t fastest(const plan& p, const launch& l, const std::vector<candidate>& candidates,
                    const torch::Tensor& out, cudaStream_t stream) {
  const auto scratch = l.beta != 0.0f ? at::empty_strided(out.sizes(), out.strides(), out.options()) : out;
  void* target = scratch.data_ptr();
  stopwatch watch(stream);
  const auto start = watch.mark();
  if (run(p, l, candidates[0], target, stream) != CUBLAS_STATUS_SUCCESS) return 0;
  const float once = std::max(watch.ms(start, watch.mark()), 1e-3f);
  const int reps = std::clamp(static_cast<int>(1.0f / once), 1, 64);
  const int warm = std::clamp(static_cast<int>(50.0f / once), 1, 4000);
  for (int i = 0; i < warm; ++i) run(p, l, candidates[0], target, stream);
  constexpr int rounds = 8;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> marks(candidates.size());
  std::vector<bool> failed(candidates.size(), false);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (failed[c]) continue;
      const auto from = watch.mark();
      for (int i = 0; i < reps && !failed[c]; ++i)
        failed[c] = run(p, l, candidates[c], target, stream) != CUBLAS_STATUS_SUCCESS;
      marks[c].emplace_back(from, watch.mark());
    }
  }
  std::vector<float> median(candidates.size(), 0);
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (failed[c]) continue;
    std::vector<float> times;
    for (const auto& [from, to] : marks[c]) times.push_back(watch.ms(from, to));
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    median[c] = times[times.size() / 2];
  }
  if (failed[0]) return 0;
  std::size_t best = 0;
  for (std::size_t c = 1; c < candidates.size(); ++c)
    if (!failed[c] && median[c] < median[best]) best = c;
  return median[best] <= 0.98f * median[0] ? best : 0;
}

std::mutex chosen_mutex;
std::map<std::vector<std::int64_t>, candidate>& chosen() {
  static std::map<std::vector<std::int64_t>, candidate> map;
  return map;
}

// Up to 8 of cuBLASLt's algorithms for p and l's alignments, with `workspace` bytes at most: the
// heuristic's first first.
std::vector<cublasLtMatmulAlgo_t> heuristic(const plan& p, const launch& l, std::size_t workspace) {
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                        decltype(&cublasLtMatmulPreferenceDestroy)>
      owned(pref, &cublasLtMatmulPreferenceDestroy);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                             sizeof(workspace)),
        "workspace");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, l.first_aligned},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, l.second_aligned},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, l.out_aligned},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, l.out_aligned}};
  for (const auto& [which, bytes] : aligned)
    check(cublasLtMatmulPreferenceSetAttribute(pref, which, &bytes, sizeof(bytes)), "alignment");
  constexpr int most = 8;
  cublasLtMatmulHeuristicResult_t results[most] = {};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(at::cuda::getCurrentCUDABlasLtHandle(), p.op, p.a, p.b, p.c, p.c, pref,
                                       most, results, &found),
        "heuristic");
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  return algos;
}

// The candidates for p: those offered for no workspace, run without one (the heuristic's first
// of them first), then those offered for torch's workspace, run with it. An algorithm offered both
// ways runs as two kernels: without a workspace it schedules its tiles statically, with one it
// hands them out through a counter there (the memset above) -- less idle after each product,
// against a better balance inside a large one.
std::vector<candidate> candidates_for(const plan& p, const launch& l) {
  std::vector<candidate> out;
  for (const auto& a : heuristic(p, l, 0)) out.push_back({a, false});
  for (const auto& a : heuristic(p, l, at::cuda::getCUDABlasLtWorkspaceSize())) out.push_back({a, true});
  return out;
}

// False where cuBLASLt offers no algorithm for it (ATen then computes it).
bool cublaslt_mm_into(const launch& l, const torch::Tensor& out) {
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(out.get_device()).stream();
  plan p;
  make_plan(p, l);
  std::optional<candidate> algo;
  {
    std::lock_guard<std::mutex> lock(chosen_mutex);
    const auto it = chosen().find(l.key);
    if (it != chosen().end()) algo = it->second;
  }
  if (!algo) {
    const auto candidates = candidates_for(p, l);
    if (candidates.empty()) return false;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capture);
    if (capture != cudaStreamCaptureStatusNone || candidates.size() == 1) {
      algo = candidates[0];  // not kept: timed once no graph is being captured
      if (candidates.size() == 1) {
        std::lock_guard<std::mutex> lock(chosen_mutex);
        chosen().emplace(l.key, *algo);
      }
    } else {
      const auto kept = fastest(p, l, candidates, out, stream);
      algo = candidates[kept];
      std::lock_guard<std::mutex> lock(chosen_mutex);
      if (chosen().emplace(l.key, *algo).second) {
        ++shapes_timed;
        if (kept != 0) ++shapes_replaced;
      }
    }
  }
  return run(p, l, *algo, l.out_ptr, stream) == CUBLAS_STATUS_SUCCESS;
}

#endif  // COHORT_WITH_CUDA

}  // namespace

void mm_into(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate,
             const torch::Tensor& bias) {
  check_operands(out, a, b, accumulate, bias);
#ifdef COHORT_WITH_CUDA
  if (timed_picks_on.load() && !at::globalContext().deterministicAlgorithms()) {
    if (const auto l = describe(out, a, b, accumulate, bias); l && cublaslt_mm_into(*l, out)) return;
  }
#endif
  aten_mm_into(out, a, b, accumulate, bias);
}

torch::Tensor mm(const torch::Tensor& a, const torch::Tensor& b) {
  auto out = torch::empty({a.size(0), b.size(1)}, a.options());
  mm_into(out, a, b);
  return out;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  auto y = torch::empty(sizes, x.options());
  mm_into(y.view({-1, weight.size(0)}), x.reshape({-1, x.size(-1)}), weight.t(), false, bias);
  return y;
}

void set_timed_picks(bool on) { timed_picks_on.store(on); }
bool timed_picks() { return timed_picks_on.load(); }

void set_own_gemm(bool on) { own_gemm_on.store(on); }
bool own_gemm() { return own_gemm_on.load(); }
void set_own_gemm_rotary(bool on) { own_gemm_rotary_on.store(on); }
bool own_gemm_rotary() { return own_gemm_rotary_on.load(); }

tuning_counts tuning() { return {shapes_timed.load(), shapes_replaced.load()}; }

}  // namespace cohort::core::model::gemm
