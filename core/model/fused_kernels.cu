// CUDA kernels for the decoder's fused path: rotary embedding, SwiGLU and the LM head's
// cross-entropy; and the optimizer's AdamW and sum of squares (fused_kernels.hpp).
#include "core/model/fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace cohort::core::model::kernels {
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

constexpr int threads_per_block = 256;

// Enough blocks to fill the device a few times over; the kernels stride over the rest.
unsigned int blocks_for(std::int64_t items) {
  const std::int64_t blocks = (items + threads_per_block - 1) / threads_per_block;
  constexpr std::int64_t most = 65535LL * 8;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > most ? most : blocks));
}

// Vec elements per thread, loaded as one 16-byte access when Vec > 1 (the caller checks
// alignment and that the row length is a multiple of Vec).
template <typename T, int Vec>
struct alignas(sizeof(T) * Vec) packed {
  T v[Vec];
};

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// One thread per (row, rotated head, group of Vec pairs (i, i + half) of that head).
template <typename T, int Vec, bool Backward>
__global__ void rotary_half_kernel(const T* __restrict__ in, T* __restrict__ out,
                                   const float* __restrict__ cos, const float* __restrict__ sin,
                                   std::int64_t rows, std::int64_t cols, std::int64_t rot_heads,
                                   std::int64_t head_dim, std::int64_t seq_len) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t groups_per_head = half / Vec;
  const std::int64_t groups_per_row = rot_heads * groups_per_head;
  const std::int64_t total = rows * groups_per_row;
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       p < total; p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = p / groups_per_row;
    const std::int64_t in_row = p - row * groups_per_row;
    const std::int64_t head = in_row / groups_per_head;
    const std::int64_t i = (in_row - head * groups_per_head) * Vec;
    const std::int64_t t = row % seq_len;
    const std::int64_t lo = row * cols + head * head_dim + i, hi = lo + half;
    const auto a = *reinterpret_cast<const packed<T, Vec>*>(in + lo);
    const auto b = *reinterpret_cast<const packed<T, Vec>*>(in + hi);
    const float* c = cos + t * head_dim + i;
    const float* s = sin + t * head_dim + i;
    packed<T, Vec> y_lo, y_hi;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float x_lo = to_float(a.v[k]), x_hi = to_float(b.v[k]);
      const float c_lo = c[k], c_hi = c[k + half], s_lo = s[k], s_hi = s[k + half];
      if (Backward) {
        y_lo.v[k] = from_float<T>(x_lo * c_lo + x_hi * s_hi);
        y_hi.v[k] = from_float<T>(x_hi * c_hi - x_lo * s_lo);
      } else {
        y_lo.v[k] = from_float<T>(x_lo * c_lo - x_hi * s_lo);
        y_hi.v[k] = from_float<T>(x_hi * c_hi + x_lo * s_hi);
      }
    }
    *reinterpret_cast<packed<T, Vec>*>(out + lo) = y_lo;
    *reinterpret_cast<packed<T, Vec>*>(out + hi) = y_hi;
  }
}

template <typename T, int Vec>
void launch_rotary_kernel(direction dir, const T* x, T* y, const float* cos, const float* sin,
                          std::int64_t rows, std::int64_t cols, std::int64_t rot_heads,
                          std::int64_t head_dim, std::int64_t seq_len, cudaStream_t stream) {
  const std::int64_t items = rows * rot_heads * (head_dim / 2 / Vec);
  if (dir == direction::backward) {
    rotary_half_kernel<T, Vec, true><<<blocks_for(items), threads_per_block, 0, stream>>>(
        x, y, cos, sin, rows, cols, rot_heads, head_dim, seq_len);
  } else {
    rotary_half_kernel<T, Vec, false><<<blocks_for(items), threads_per_block, 0, stream>>>(
        x, y, cos, sin, rows, cols, rot_heads, head_dim, seq_len);
  }
}

template <typename T>
int launch_rotary(direction dir, const void* in, void* out, const float* cos, const float* sin,
                  std::int64_t rows, std::int64_t cols, std::int64_t rot_cols,
                  std::int64_t head_dim, std::int64_t seq_len, cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const std::int64_t rot_heads = rot_cols / head_dim;
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  if (rows * rot_heads > 0) {
    // 16-byte accesses when every group of vec pairs starts 16-byte aligned.
    if ((head_dim / 2) % vec == 0 && cols % vec == 0 && aligned16(x) && aligned16(y)) {
      launch_rotary_kernel<T, vec>(dir, x, y, cos, sin, rows, cols, rot_heads, head_dim, seq_len, stream);
    } else {
      launch_rotary_kernel<T, 1>(dir, x, y, cos, sin, rows, cols, rot_heads, head_dim, seq_len, stream);
    }
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
  }
  if (rot_cols < cols && rows > 0) {  // the columns rotary leaves alone (v)
    const std::size_t pitch = static_cast<std::size_t>(cols) * sizeof(T);
    return static_cast<int>(cudaMemcpy2DAsync(
        y + rot_cols, pitch, x + rot_cols, pitch, static_cast<std::size_t>(cols - rot_cols) * sizeof(T),
        static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, stream));
  }
  return 0;
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T, int Vec>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate_up, T* __restrict__ out,
                                      std::int64_t rows, std::int64_t inner) {
  const std::int64_t groups_per_row = inner / Vec;
  const std::int64_t total = rows * groups_per_row;
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       p < total; p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = p / groups_per_row;
    const std::int64_t col = (p - row * groups_per_row) * Vec;
    const T* g_row = gate_up + row * 2 * inner;
    const auto g = *reinterpret_cast<const packed<T, Vec>*>(g_row + col);
    const auto u = *reinterpret_cast<const packed<T, Vec>*>(g_row + inner + col);
    packed<T, Vec> y;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float gf = to_float(g.v[k]);
      y.v[k] = from_float<T>(gf * sigmoid(gf) * to_float(u.v[k]));
    }
    *reinterpret_cast<packed<T, Vec>*>(out + row * inner + col) = y;
  }
}

template <typename T, int Vec>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad_out, const T* __restrict__ gate_up,
                                       T* __restrict__ grad_gate_up, std::int64_t rows,
                                       std::int64_t inner) {
  const std::int64_t groups_per_row = inner / Vec;
  const std::int64_t total = rows * groups_per_row;
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       p < total; p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = p / groups_per_row;
    const std::int64_t col = (p - row * groups_per_row) * Vec;
    const std::int64_t base = row * 2 * inner;
    const auto g = *reinterpret_cast<const packed<T, Vec>*>(gate_up + base + col);
    const auto u = *reinterpret_cast<const packed<T, Vec>*>(gate_up + base + inner + col);
    const auto go = *reinterpret_cast<const packed<T, Vec>*>(grad_out + row * inner + col);
    packed<T, Vec> dg, du;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float gf = to_float(g.v[k]), uf = to_float(u.v[k]), gof = to_float(go.v[k]);
      const float s = sigmoid(gf);
      dg.v[k] = from_float<T>(gof * uf * s * (1.0f + gf * (1.0f - s)));
      du.v[k] = from_float<T>(gof * gf * s);
    }
    *reinterpret_cast<packed<T, Vec>*>(grad_gate_up + base + col) = dg;
    *reinterpret_cast<packed<T, Vec>*>(grad_gate_up + base + inner + col) = du;
  }
}

template <typename T>
int launch_swiglu_forward(const void* gate_up, void* out, std::int64_t rows, std::int64_t inner,
                          cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const T* gu = static_cast<const T*>(gate_up);
  T* y = static_cast<T*>(out);
  if (rows * inner == 0) return 0;
  if (inner % vec == 0 && aligned16(gu) && aligned16(y)) {
    swiglu_forward_kernel<T, vec><<<blocks_for(rows * inner / vec), threads_per_block, 0, stream>>>(
        gu, y, rows, inner);
  } else {
    swiglu_forward_kernel<T, 1><<<blocks_for(rows * inner), threads_per_block, 0, stream>>>(
        gu, y, rows, inner);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_swiglu_backward(const void* grad_out, const void* gate_up, void* grad_gate_up,
                           std::int64_t rows, std::int64_t inner, cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const T* go = static_cast<const T*>(grad_out);
  const T* gu = static_cast<const T*>(gate_up);
  T* dgu = static_cast<T*>(grad_gate_up);
  if (rows * inner == 0) return 0;
  if (inner % vec == 0 && aligned16(go) && aligned16(gu) && aligned16(dgu)) {
    swiglu_backward_kernel<T, vec><<<blocks_for(rows * inner / vec), threads_per_block, 0, stream>>>(
        go, gu, dgu, rows, inner);
  } else {
    swiglu_backward_kernel<T, 1><<<blocks_for(rows * inner), threads_per_block, 0, stream>>>(
        go, gu, dgu, rows, inner);
  }
  return static_cast<int>(cudaGetLastError());
}

// Running (max, sum of exp(x - max)) of a set of logits; -inf logits add nothing.
struct softmax_state {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ __forceinline__ void add_logit(softmax_state& a, float v) {
  if (v == -INFINITY) return;
  if (v > a.max) {
    a.sum = a.sum * expf(a.max - v) + 1.0f;
    a.max = v;
  } else {
    a.sum += expf(v - a.max);
  }
}

__device__ __forceinline__ softmax_state merge(softmax_state a, softmax_state b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

constexpr int ce_threads = 512;

// The block's state, the same in every thread: warps by shuffles, then across the warps.
__device__ softmax_state block_merge(softmax_state s) {
  __shared__ float maxes[ce_threads / 32], sums[ce_threads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const softmax_state other{__shfl_xor_sync(0xffffffffu, s.max, offset),
                              __shfl_xor_sync(0xffffffffu, s.sum, offset)};
    s = merge(s, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    maxes[warp] = s.max;
    sums[warp] = s.sum;
  }
  __syncthreads();
  softmax_state all;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) all = merge(all, {maxes[w], sums[w]});
  return all;
}

// One block per row. No __restrict__ on logits and grad: they may be one buffer.
template <typename T, int Vec>
__global__ void __launch_bounds__(ce_threads)
    cross_entropy_kernel(const T* logits, const std::int64_t* __restrict__ targets,
                         float* __restrict__ loss, T* grad, std::int64_t cols,
                         std::int64_t ignore_index) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  T* g = grad == nullptr ? nullptr : grad + row * cols;
  const std::int64_t target = targets[row];
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * Vec;
  if (target == ignore_index) {
    if (threadIdx.x == 0) loss[row] = 0.0f;
    if (g == nullptr) return;
    packed<T, Vec> zero;
#pragma unroll
    for (int k = 0; k < Vec; ++k) zero.v[k] = from_float<T>(0.0f);
    for (std::int64_t j = threadIdx.x * Vec; j < cols; j += step)
      *reinterpret_cast<packed<T, Vec>*>(g + j) = zero;
    return;
  }
  const bool valid = target >= 0 && target < cols;
  // Read before the barrier in block_merge: no thread writes the gradient before it.
  const float picked = threadIdx.x == 0 && valid ? to_float(x[target]) : 0.0f;
  softmax_state s;
  for (std::int64_t j = threadIdx.x * Vec; j < cols; j += step) {
    const auto p = *reinterpret_cast<const packed<T, Vec>*>(x + j);
#pragma unroll
    for (int k = 0; k < Vec; ++k) add_logit(s, to_float(p.v[k]));
  }
  const softmax_state all = block_merge(s);
  const float lse = all.max + logf(all.sum);
  if (threadIdx.x == 0) loss[row] = valid ? lse - picked : NAN;
  if (g == nullptr) return;
  for (std::int64_t j = threadIdx.x * Vec; j < cols; j += step) {
    const auto p = *reinterpret_cast<const packed<T, Vec>*>(x + j);
    packed<T, Vec> d;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float prob = expf(to_float(p.v[k]) - lse);
      d.v[k] = from_float<T>(j + k == target ? prob - 1.0f : prob);
    }
    *reinterpret_cast<packed<T, Vec>*>(g + j) = d;
  }
}

template <typename T>
int launch_cross_entropy(const void* logits, const std::int64_t* targets, float* loss, void* grad,
                         std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                         cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const T* x = static_cast<const T*>(logits);
  T* g = static_cast<T*>(grad);
  if (rows == 0) return 0;
  if (rows > 2147483647LL) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned int blocks = static_cast<unsigned int>(rows);
  if (cols % vec == 0 && aligned16(x) && (g == nullptr || aligned16(g))) {
    cross_entropy_kernel<T, vec><<<blocks, ce_threads, 0, stream>>>(x, targets, loss, g, cols, ignore_index);
  } else {
    cross_entropy_kernel<T, 1><<<blocks, ce_threads, 0, stream>>>(x, targets, loss, g, cols, ignore_index);
  }
  return static_cast<int>(cudaGetLastError());
}

// ---- The optimizer: AdamW and the gradient's sum of squares ----

template <typename T, int Vec>
__device__ __forceinline__ packed<T, Vec> load(const T* p) {
  return *reinterpret_cast<const packed<T, Vec>*>(p);
}

template <typename T, int Vec>
__device__ __forceinline__ void store(T* p, const packed<T, Vec>& v) {
  *reinterpret_cast<packed<T, Vec>*>(p) = v;
}

// One thread per group of Vec elements (n a multiple of Vec, every pointer aligned to its group).
template <typename G, typename C, int Vec>
__global__ void adamw_kernel(float* __restrict__ param, const G* __restrict__ grad,
                             float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                             C* __restrict__ copy, std::int64_t n, adamw_scalars s) {
  const float decay = 1.0f - s.lr * s.weight_decay;
  const std::int64_t groups = n / Vec;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < groups; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t at = i * Vec;
    auto p = load<float, Vec>(param + at);
    auto m = load<float, Vec>(exp_avg + at);
    auto v = load<float, Vec>(exp_avg_sq + at);
    const auto g = load<G, Vec>(grad + at);
    packed<C, Vec> c;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float gk = to_float(g.v[k]) * s.grad_scale;
      m.v[k] = s.beta1 * m.v[k] + s.one_minus_beta1 * gk;
      v.v[k] = s.beta2 * v.v[k] + s.one_minus_beta2 * gk * gk;
      const float denom = sqrtf(v.v[k]) / s.bias_correction2_sqrt + s.eps;
      p.v[k] = p.v[k] * decay - s.step_size * m.v[k] / denom;
      c.v[k] = from_float<C>(p.v[k]);
    }
    store<float, Vec>(param + at, p);
    store<float, Vec>(exp_avg + at, m);
    store<float, Vec>(exp_avg_sq + at, v);
    if (copy != nullptr) store<C, Vec>(copy + at, c);
  }
}

bool aligned_to(const void* p, std::size_t bytes) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

template <typename G, typename C>
int launch_adamw(float* param, const void* grad, float* exp_avg, float* exp_avg_sq, void* copy,
                 std::int64_t n, const adamw_scalars& s, cudaStream_t stream) {
  if (n == 0) return 0;
  const G* g = static_cast<const G*>(grad);
  C* c = static_cast<C*>(copy);
  constexpr int vec = 4;
  if (n % vec == 0 && aligned_to(param, 16) && aligned_to(exp_avg, 16) && aligned_to(exp_avg_sq, 16) &&
      aligned_to(g, sizeof(G) * vec) && aligned_to(c, sizeof(C) * vec)) {
    adamw_kernel<G, C, vec><<<blocks_for(n / vec), threads_per_block, 0, stream>>>(
        param, g, exp_avg, exp_avg_sq, c, n, s);
  } else {
    adamw_kernel<G, C, 1><<<blocks_for(n), threads_per_block, 0, stream>>>(param, g, exp_avg,
                                                                           exp_avg_sq, c, n, s);
  }
  return static_cast<int>(cudaGetLastError());
}

constexpr int square_threads = 256;

// Adds the fp64 values of a block's threads; the total lands in thread 0.
__device__ double block_sum(double value) {
  __shared__ double shared[square_threads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int offset = square_threads / 2; offset > 0; offset /= 2) {
    if (threadIdx.x < offset) shared[threadIdx.x] += shared[threadIdx.x + offset];
    __syncthreads();
  }
  return shared[0];
}

template <typename T, int Vec>
__global__ void __launch_bounds__(square_threads)
    square_partials_kernel(const T* __restrict__ x, std::int64_t n, double* __restrict__ partials) {
  double sum = 0.0;
  const std::int64_t groups = n / Vec;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(square_threads) + threadIdx.x;
       i < groups; i += static_cast<std::int64_t>(gridDim.x) * square_threads) {
    const auto v = load<T, Vec>(x + i * Vec);
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const double f = to_float(v.v[k]);
      sum += f * f;
    }
  }
  const double total = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(square_threads)
    sum_partials_kernel(const double* __restrict__ partials, int count, double* __restrict__ out) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += square_threads) sum += partials[i];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) *out = total;
}

template <typename T>
int launch_square_sum(const void* x, std::int64_t n, double* partials, double* out,
                      cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const T* t = static_cast<const T*>(x);
  const bool vectorised = n % vec == 0 && aligned16(t);
  const std::int64_t groups = vectorised ? n / vec : n;
  const std::int64_t wanted = (groups + square_threads - 1) / square_threads;
  const int blocks = static_cast<int>(wanted < square_sum_partials ? wanted : square_sum_partials);
  if (blocks > 0) {
    if (vectorised) {
      square_partials_kernel<T, vec><<<blocks, square_threads, 0, stream>>>(t, n, partials);
    } else {
      square_partials_kernel<T, 1><<<blocks, square_threads, 0, stream>>>(t, n, partials);
    }
  }
  sum_partials_kernel<<<1, square_threads, 0, stream>>>(partials, blocks, out);
  return static_cast<int>(cudaGetLastError());
}

// Calls f with a value of the element type `type` names.
template <class F>
int with_element_type(dtype type, F&& f) {
  switch (type) {
    case dtype::bf16:
      return f(__nv_bfloat16{});
    case dtype::f16:
      return f(__half{});
    case dtype::f32:
      break;
  }
  return f(float{});
}

}  // namespace

int cross_entropy(dtype type, const void* logits, const std::int64_t* targets, float* loss,
                  void* grad, std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                  void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_cross_entropy<decltype(element)>(logits, targets, loss, grad, rows, cols,
                                                   ignore_index, static_cast<cudaStream_t>(stream));
  });
}

int rotary_half(direction dir, dtype type, const void* in, void* out, const float* cos,
                const float* sin, std::int64_t rows, std::int64_t cols, std::int64_t rot_cols,
                std::int64_t head_dim, std::int64_t seq_len, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_rotary<decltype(element)>(dir, in, out, cos, sin, rows, cols, rot_cols, head_dim,
                                            seq_len, static_cast<cudaStream_t>(stream));
  });
}

int swiglu_forward(dtype type, const void* gate_up, void* out, std::int64_t rows,
                   std::int64_t inner, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_swiglu_forward<decltype(element)>(gate_up, out, rows, inner,
                                                    static_cast<cudaStream_t>(stream));
  });
}

int swiglu_backward(dtype type, const void* grad_out, const void* gate_up, void* grad_gate_up,
                    std::int64_t rows, std::int64_t inner, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_swiglu_backward<decltype(element)>(grad_out, gate_up, grad_gate_up, rows, inner,
                                                     static_cast<cudaStream_t>(stream));
  });
}

int adamw(float* param, dtype grad_type, const void* grad, float* exp_avg, float* exp_avg_sq,
          dtype copy_type, void* copy, std::int64_t n, const adamw_scalars& scalars, void* stream) {
  return with_element_type(grad_type, [&](auto g) {
    return with_element_type(copy_type, [&](auto c) {
      return launch_adamw<decltype(g), decltype(c)>(param, grad, exp_avg, exp_avg_sq, copy, n, scalars,
                                                    static_cast<cudaStream_t>(stream));
    });
  });
}

int square_sum(dtype type, const void* x, std::int64_t n, double* partials, double* out, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_square_sum<decltype(element)>(x, n, partials, out, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace cohort::core::model::kernels
