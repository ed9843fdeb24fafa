// cuBLASLt GEMMs with epilogues (lt_matmul.hpp).
#include "core/model/lt_matmul.hpp"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace cohort::core::model::lt {
namespace {

// The most workspace an algorithm may ask for (Hopper's GEMMs use up to 32 MiB).
constexpr std::size_t most_workspace = 32u << 20;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(status));
  }
}

cudaDataType_t data_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return CUDA_R_32F;
    case torch::kBFloat16:
      return CUDA_R_16BF;
    case torch::kHalf:
      return CUDA_R_16F;
    default:
      throw std::invalid_argument(std::string("lt::gemm: fp32, bf16 or fp16 tensors expected, not ") +
                                  c10::toString(t));
  }
}

cublasLtEpilogue_t lt_epilogue(epilogue ep) {
  switch (ep) {
    case epilogue::bias_gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case epilogue::dgelu_bias_grad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case epilogue::b_sums:  // cuBLAS's A is b (see layouts)
      return CUBLASLT_EPILOGUE_BGRADA;
    case epilogue::a_sums:
      return CUBLASLT_EPILOGUE_BGRADB;
    case epilogue::none:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// One handle per device, made on first use and kept for the process.
cublasLtHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& h = handles[device];
  if (h == nullptr) check(cublasLtCreate(&h), "create");
  return h;
}

// One GEMM in g's row-major terms: sizes, layout, dtype, epilogue and its operands' addresses
// (null where only the question "is there an algorithm" is asked: null counts as 16-byte aligned).
struct problem {
  std::int64_t m = 0, n = 0, k = 0;
  bool a_transposed = false, b_transposed = false;
  torch::ScalarType type = torch::kFloat;
  epilogue ep = epilogue::none;
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  void* bias = nullptr;
  void* aux = nullptr;
};

void check_matrix(const torch::Tensor& t, const char* name) {
  if (!t.defined() || t.dim() != 2 || !t.is_cuda() || !t.is_contiguous()) {
    throw std::invalid_argument(std::string("lt::gemm: ") + name + " must be a contiguous 2-D CUDA tensor");
  }
}

bool wants_aux(epilogue ep) { return ep == epilogue::bias_gelu_aux || ep == epilogue::dgelu_bias_grad; }

// g as a problem, checked against the contract.
problem problem_of(const gemm& g) {
  check_matrix(g.a, "a");
  check_matrix(g.b, "b");
  check_matrix(g.out, "out");
  problem p;
  p.m = g.a_transposed ? g.a.size(1) : g.a.size(0);
  p.k = g.a_transposed ? g.a.size(0) : g.a.size(1);
  p.n = g.b_transposed ? g.b.size(0) : g.b.size(1);
  p.a_transposed = g.a_transposed;
  p.b_transposed = g.b_transposed;
  p.type = g.a.scalar_type();
  p.ep = g.ep;
  data_type(p.type);  // fp32, bf16 or fp16
  const std::int64_t kb = g.b_transposed ? g.b.size(1) : g.b.size(0);
  if (kb != p.k || g.out.size(0) != p.m || g.out.size(1) != p.n || g.b.scalar_type() != p.type ||
      g.out.scalar_type() != p.type || g.b.device() != g.a.device() || g.out.device() != g.a.device()) {
    throw std::invalid_argument(
        "lt::gemm: op(a) (m, k), op(b) (k, n) and out (m, n) of one dtype and device "
        "expected");
  }
  const std::int64_t bias_len = g.ep == epilogue::a_sums ? p.m : p.n;
  if (g.ep != epilogue::none &&
      (!g.bias.defined() || g.bias.dim() != 1 || g.bias.size(0) != bias_len ||
       g.bias.scalar_type() != p.type || g.bias.device() != g.a.device() || !g.bias.is_contiguous())) {
    throw std::invalid_argument(
        "lt::gemm: the epilogue's bias vector (n, or m for a_sums) in the GEMM's dtype "
        "expected");
  }
  if (wants_aux(g.ep) && (!g.aux.defined() || g.aux.sizes() != g.out.sizes() || !g.aux.is_contiguous() ||
                          g.aux.scalar_type() != p.type || g.aux.device() != g.a.device())) {
    throw std::invalid_argument(
        "lt::gemm: the GELU epilogue's aux matrix (m, n) in the GEMM's dtype expected");
  }
  p.a = g.a.data_ptr();
  p.b = g.b.data_ptr();
  p.out = g.out.data_ptr();
  if (g.ep != epilogue::none) p.bias = g.bias.data_ptr();
  if (wants_aux(g.ep)) p.aux = g.aux.data_ptr();
  return p;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The descriptors of one GEMM in cuBLAS's column-major terms: row-major out (m, n) is column-major
// D (n, m), so D = op(b') op(a') with b's storage as cuBLAS's A and a's as its B.
class plan {
 public:
  explicit plan(const problem& p) : p_(p) {
    const cudaDataType_t type = data_type(p.type);
    check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t ta = p.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    set(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    const cublasLtEpilogue_t ep = lt_epilogue(p.ep);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, ep);
    if (p.ep != epilogue::none) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    if (wants_aux(p.ep)) {
      const std::int64_t ld = p.n;
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    }
    // cuBLAS's A: b's storage, (n, k) after its op; B: a's, (k, m) after its op.
    layout(&a_, type, p.b_transposed ? p.k : p.n, p.b_transposed ? p.n : p.k);
    layout(&b_, type, p.a_transposed ? p.m : p.k, p.a_transposed ? p.k : p.m);
    layout(&d_, type, p.n, p.m);
  }
  plan(const plan&) = delete;
  plan& operator=(const plan&) = delete;
  ~plan() {
    if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
    if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
    if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
  }

  // The heuristic's first algorithm, if any.
  bool choose(cublasLtHandle_t handle, cublasLtMatmulHeuristicResult_t& result) const {
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const std::size_t ws = most_workspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, d_, d_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return status == CUBLAS_STATUS_SUCCESS && found > 0;
  }

  void launch(cublasLtHandle_t handle, const cublasLtMatmulHeuristicResult_t& chosen,
              const torch::Device& device, cudaStream_t stream) const {
    const float one = 1.0f, zero = 0.0f;
    torch::Tensor workspace;
    if (chosen.workspaceSize > 0) {
      workspace = torch::empty({static_cast<std::int64_t>(chosen.workspaceSize)},
                               torch::TensorOptions().device(device).dtype(torch::kUInt8));
    }
    check(cublasLtMatmul(handle, desc_, &one, p_.b, a_, p_.a, b_, &zero, p_.out, d_, p_.out, d_, &chosen.algo,
                         workspace.defined() ? workspace.data_ptr() : nullptr, chosen.workspaceSize, stream),
          "matmul");
  }

 private:
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    check(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)), "descriptor attribute");
  }
  static void layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, std::int64_t rows, std::int64_t cols) {
    check(cublasLtMatrixLayoutCreate(l, type, static_cast<std::uint64_t>(rows),
                                     static_cast<std::uint64_t>(cols), rows),
          "matrix layout");
  }

  const problem& p_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

// The chosen algorithm per device, sizes, layout, dtype, epilogue and the operands' 16-byte
// alignment (which the heuristic takes into account); found false: cuBLASLt has none.
using algo_key = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, bool, bool, int, int, int>;
struct algo_entry {
  bool found = false;
  cublasLtMatmulHeuristicResult_t result{};
};

algo_entry algorithm_for(const problem& p, int device) {
  static std::mutex mutex;
  static std::map<algo_key, algo_entry> chosen;
  const int aligned = (aligned16(p.a) ? 1 : 0) | (aligned16(p.b) ? 2 : 0) | (aligned16(p.out) ? 4 : 0) |
                      (aligned16(p.bias) ? 8 : 0) | (aligned16(p.aux) ? 16 : 0);
  const algo_key key{
      device, p.m, p.n, p.k, p.a_transposed, p.b_transposed, static_cast<int>(p.type), static_cast<int>(p.ep),
      aligned};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = chosen.find(key);
    if (it != chosen.end()) return it->second;
  }
  algo_entry e;
  e.found = plan(p).choose(handle_for(device), e.result);
  const std::lock_guard<std::mutex> lock(mutex);
  return chosen.emplace(key, e).first->second;
}

}  // namespace

bool supported(std::int64_t m, std::int64_t n, std::int64_t k, bool a_transposed, bool b_transposed,
               torch::ScalarType type, epilogue ep, const torch::Device& device) {
  if (!device.is_cuda() || m <= 0 || n <= 0 || k <= 0 ||
      (type != torch::kFloat && type != torch::kBFloat16 && type != torch::kHalf))
    return false;
  problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_transposed = a_transposed;
  p.b_transposed = b_transposed;
  p.type = type;
  p.ep = ep;
  const c10::cuda::CUDAGuard guard(device);
  return algorithm_for(p, c10::cuda::current_device()).found;
}

void run(const gemm& g) {
  const problem p = problem_of(g);
  const c10::cuda::CUDAGuard guard(g.a.device());
  const int device = g.a.get_device();
  const algo_entry e = algorithm_for(p, device);
  if (!e.found) throw std::runtime_error("lt::gemm: cuBLASLt has no algorithm for this GEMM and epilogue");
  plan(p).launch(handle_for(device), e.result, g.a.device(), at::cuda::getCurrentCUDAStream(device).stream());
}

}  // namespace cohort::core::model::lt
