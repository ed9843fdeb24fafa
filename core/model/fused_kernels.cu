// CUDA kernels for the decoder's fused path: rotary embedding, SwiGLU, the norms with their
// residual add and the LM head's cross-entropy; and the optimizer's AdamW and sum of squares
// (fused_kernels.hpp).
#include "core/model/fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/model/rotary_math.cuh"
#include "core/model/swiglu_math.cuh"

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
// Null counts as aligned (an absent operand).
bool aligned_to(const void* p, std::size_t bytes) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

template <typename T, int Vec>
__device__ __forceinline__ packed<T, Vec> load(const T* p) {
  return *reinterpret_cast<const packed<T, Vec>*>(p);
}

template <typename T, int Vec>
__device__ __forceinline__ void store(T* p, const packed<T, Vec>& v) {
  *reinterpret_cast<packed<T, Vec>*>(p) = v;
}

// column_parts on the device: the address of (row, col).
template <typename T>
struct parts_of {
  T* part[3];
  int cols[3];
  __device__ __forceinline__ T* at(std::int64_t row, int col) const {
    if (col < cols[0]) return part[0] + row * cols[0] + col;
    col -= cols[0];
    if (col < cols[1]) return part[1] + row * cols[1] + col;
    return part[2] + row * cols[2] + (col - cols[1]);
  }
};

// One item per thread, striding over rows * items_per_row: an item is either a pair of Vec
// columns of one head, lo = head * head_dim + j (j < half) and hi = lo + half, or Vec columns of
// v, copied. A pair reads both halves once and writes both, so every element is loaded once and
// stored once; a warp's lo loads, hi loads and v copies each cover contiguous stretches of a
// part's row. The cos/sin rows come through the read-only cache (no shared memory, no barrier).
// Index math within a row in 32 bits; the pair's arithmetic is rotary_math.cuh's.
template <typename T, int Vec, bool Backward>
__global__ void rotary_half_kernel(const parts_of<const T> in, const parts_of<T> out,
                                   const float* __restrict__ cos, const float* __restrict__ sin,
                                   std::int64_t rows, int rot_heads, int head_dim, int copy_groups,
                                   std::int64_t seq_len) {
  const int half = head_dim / 2;
  const int pairs_per_head = half / Vec;
  const int pair_items = rot_heads * pairs_per_head;
  const int items_per_row = pair_items + copy_groups;
  const std::int64_t total = rows * items_per_row;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / items_per_row;
    const int item = static_cast<int>(i - row * items_per_row);
    if (item >= pair_items) {  // v
      const int col = rot_heads * head_dim + (item - pair_items) * Vec;
      store<T, Vec>(out.at(row, col), load<T, Vec>(in.at(row, col)));
      continue;
    }
    const int head = item / pairs_per_head;
    const int j = (item - head * pairs_per_head) * Vec;
    const int lo = head * head_dim + j;
    const T* x = in.at(row, lo);  // hi lies in the same head, so the same part
    const auto x_lo = load<T, Vec>(x);
    const auto x_hi = load<T, Vec>(x + half);
    const std::int64_t table_row = (row % seq_len) * head_dim;  // the row's position's cos/sin
    float c_lo[Vec], c_hi[Vec], s_lo[Vec], s_hi[Vec];
    load_table<Vec>(cos + table_row + j, c_lo);
    load_table<Vec>(cos + table_row + j + half, c_hi);
    load_table<Vec>(sin + table_row + j, s_lo);
    load_table<Vec>(sin + table_row + j + half, s_hi);
    packed<T, Vec> y_lo, y_hi;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      float lo, hi;
      if (Backward)
        rotary_backward_pair(to_float(x_lo.v[k]), to_float(x_hi.v[k]), c_lo[k], c_hi[k], s_lo[k], s_hi[k], lo,
                             hi);
      else
        rotary_forward_pair(to_float(x_lo.v[k]), to_float(x_hi.v[k]), c_lo[k], c_hi[k], s_lo[k], s_hi[k], lo,
                            hi);
      y_lo.v[k] = from_float<T>(lo);
      y_hi.v[k] = from_float<T>(hi);
    }
    T* y = out.at(row, lo);
    store<T, Vec>(y, y_lo);
    store<T, Vec>(y + half, y_hi);
  }
}

template <typename T, int Vec>
void launch_rotary_kernel(direction dir, const parts_of<const T>& x, const parts_of<T>& y, const float* cos,
                          const float* sin, std::int64_t rows, std::int64_t cols, std::int64_t rot_heads,
                          std::int64_t head_dim, std::int64_t seq_len, cudaStream_t stream) {
  const int h = static_cast<int>(rot_heads), d = static_cast<int>(head_dim);
  const int copy_groups = static_cast<int>((cols - rot_heads * head_dim) / Vec);
  const unsigned int blocks = blocks_for(rows * (rot_heads * (head_dim / 2 / Vec) + copy_groups));
  if (dir == direction::backward) {
    rotary_half_kernel<T, Vec, true>
        <<<blocks, threads_per_block, 0, stream>>>(x, y, cos, sin, rows, h, d, copy_groups, seq_len);
  } else {
    rotary_half_kernel<T, Vec, false>
        <<<blocks, threads_per_block, 0, stream>>>(x, y, cos, sin, rows, h, d, copy_groups, seq_len);
  }
}

// column_parts as the kernel reads them, checked: parts of non-negative widths summing to cols,
// each with a pointer, and no boundary inside a head below rot_cols. Returns false otherwise.
template <typename T>
bool typed_parts(const column_parts& parts, std::int64_t cols, std::int64_t rot_cols, std::int64_t head_dim,
                 parts_of<T>& out) {
  std::int64_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const std::int64_t width = parts.cols[i];
    if (width < 0 || (width > 0 && parts.part[i] == nullptr)) return false;
    out.part[i] = static_cast<T*>(parts.part[i]);
    out.cols[i] = static_cast<int>(width);
    at += width;
    if (at < rot_cols && at % head_dim != 0) return false;
  }
  return at == cols;
}

template <typename T>
int launch_rotary(direction dir, const column_parts& in, const column_parts& out, const float* cos,
                  const float* sin, std::int64_t rows, std::int64_t rot_cols, std::int64_t head_dim,
                  std::int64_t seq_len, cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  const std::int64_t cols = in.cols[0] + in.cols[1] + in.cols[2];
  if (rows == 0 || cols == 0) return 0;
  // 32-bit index math in a row.
  if (cols > 2147483647LL || head_dim > 4096 || head_dim % 2 != 0 || rot_cols % head_dim != 0 ||
      rot_cols > cols)
    return static_cast<int>(cudaErrorInvalidValue);
  parts_of<const T> x{};
  parts_of<T> y{};
  if (!typed_parts(in, cols, rot_cols, head_dim, x) || !typed_parts(out, cols, rot_cols, head_dim, y))
    return static_cast<int>(cudaErrorInvalidValue);
  // 16-byte accesses when every group of vec pairs, every v group and the tables' groups of vec
  // start 16-byte aligned.
  bool vectorised = (head_dim / 2) % vec == 0 && aligned16(cos) && aligned16(sin);
  for (int i = 0; i < 3; ++i)
    vectorised = vectorised && in.cols[i] % vec == 0 && out.cols[i] % vec == 0 &&
                 aligned_to(in.part[i], 16) && aligned_to(out.part[i], 16);
  if (vectorised) {
    launch_rotary_kernel<T, vec>(dir, x, y, cos, sin, rows, cols, rot_cols / head_dim, head_dim, seq_len,
                                 stream);
  } else {
    launch_rotary_kernel<T, 1>(dir, x, y, cos, sin, rows, cols, rot_cols / head_dim, head_dim, seq_len,
                               stream);
  }
  return static_cast<int>(cudaGetLastError());
}

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
      y.v[k] = from_float<T>(gf * swiglu_sigmoid(gf) * to_float(u.v[k]));
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
      const float s = swiglu_sigmoid(gf);
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

// ---- Block reductions ----

struct plus_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct max_op {  // NaN is passed over (fmaxf)
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// v reduced by `op` over the warp by shuffles, the same value in every lane.
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, plus_op{}); }

// v reduced by `op` over the block (blockDim.x a multiple of 32), the same value in every thread:
// each warp's by shuffles, then the warps' in warp order from `identity`. shared: 32 floats of
// the caller's.
template <class Op>
__device__ __forceinline__ float block_all_reduce(float v, float* shared, float identity, Op op) {
  v = warp_reduce(v, op);
  __syncthreads();  // the previous call's readers are done with shared
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float all = identity;
  for (unsigned int w = 0; w < blockDim.x / 32; ++w) all = op(all, shared[w]);
  return all;
}

__device__ __forceinline__ float block_all_sum(float v, float* shared) {
  return block_all_reduce(v, shared, 0.0f, plus_op{});
}
__device__ __forceinline__ float block_all_max(float v, float* shared) {
  return block_all_reduce(v, shared, -INFINITY, max_op{});
}

// ---- The LM head's cross-entropy ----

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

// One block per row, in two passes over the logits: rows longer than the resident kernel below
// holds. No __restrict__ on logits and grad: they may be one buffer.
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

// A row of logits in three parts: `head` elements up to the row's first 16-byte boundary, then
// `packs` whole groups of Vec, then the `tail` after the last whole group (head and tail < Vec).
struct row_parts {
  std::int64_t head = 0, packs = 0, tail = 0;
};

template <typename T, int Vec>
__device__ __forceinline__ row_parts parts_of_row(const T* x, std::int64_t cols) {
  row_parts p;
  if (Vec > 1) {
    const auto past = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(x) % 16);
    p.head = past == 0 ? 0 : (16 - past) / static_cast<std::int64_t>(sizeof(T));
    if (p.head > cols) p.head = cols;
  }
  p.packs = (cols - p.head) / Vec;
  p.tail = cols - p.head - p.packs * Vec;
  return p;
}

constexpr int ce_resident_threads = 512;

// One block per row, the row kept in shared memory (dynamic, packs * 16 bytes): it is read from
// global memory once (its max taken on the way), its sum of exp(x - max) taken from shared memory,
// and its gradient written from there, so the logits cross memory once each way (the streaming
// kernel above reads them twice). Shared rather than registers so that two or more blocks share a
// multiprocessor (a GPT-2 row of 50,257 bf16 is 100 KB of its 228) and one block's reductions
// overlap another's loads and stores. The row may start anywhere (parts_of_row); grad, when not
// null, lies at the same distance from a 16-byte boundary. No __restrict__: they may be one
// buffer (every load is done before the first barrier, every store after it).
template <typename T, int Vec>
__global__ void __launch_bounds__(ce_resident_threads)
    cross_entropy_resident_kernel(const T* logits, const std::int64_t* __restrict__ targets,
                                  float* __restrict__ loss, T* grad, int cols, std::int64_t ignore_index) {
  extern __shared__ uint4 row_packs[];
  __shared__ float shared[32];
  constexpr float log2e = 1.4426950408889634f;
  auto* kept = reinterpret_cast<packed<T, Vec>*>(row_packs);
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  T* g = grad == nullptr ? nullptr : grad + row * cols;
  const std::int64_t target = targets[row];
  const row_parts parts = parts_of_row<T, Vec>(x, cols);
  const int body = static_cast<int>(parts.head), packs = static_cast<int>(parts.packs),
            tail_from = cols - static_cast<int>(parts.tail);
  const int me = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const bool head_mine = me < parts.head, tail_mine = me < parts.tail;
  if (target == ignore_index) {
    if (me == 0) loss[row] = 0.0f;
    if (g == nullptr) return;
    packed<T, Vec> zero;
#pragma unroll
    for (int k = 0; k < Vec; ++k) zero.v[k] = from_float<T>(0.0f);
    for (int j = me; j < packs; j += threads) store<T, Vec>(g + body + j * Vec, zero);
    if (head_mine) g[me] = zero.v[0];
    if (tail_mine) g[tail_from + me] = zero.v[0];
    return;
  }
  const bool valid = target >= 0 && target < cols;
  const float picked = me == 0 && valid ? to_float(x[target]) : 0.0f;
  // The target's place in the row, -1 when it is not there (a NaN loss, a plain softmax).
  const int hit = valid ? static_cast<int>(target) : -1;
  const float head = head_mine ? to_float(x[me]) : -INFINITY;
  const float tail = tail_mine ? to_float(x[tail_from + me]) : -INFINITY;
  float most = fmaxf(head, tail);
#pragma unroll 4
  for (int j = me; j < packs; j += threads) {
    const auto v = load<T, Vec>(x + body + j * Vec);
    kept[j] = v;
#pragma unroll
    for (int k = 0; k < Vec; ++k) most = fmaxf(most, to_float(v.v[k]));
  }
  const float row_max = block_all_max(most, shared);  // its barrier also publishes `kept`
  // exp(y - row_max) as 2^((y - row_max) log2 e); -inf gives 0, NaN stays NaN.
  const float shift = row_max * log2e;
  float sum = 0.0f;
  for (int j = me; j < packs; j += threads) {
    const auto v = kept[j];
#pragma unroll
    for (int k = 0; k < Vec; ++k) sum += exp2f(fmaf(to_float(v.v[k]), log2e, -shift));
  }
  if (head_mine) sum += exp2f(fmaf(head, log2e, -shift));
  if (tail_mine) sum += exp2f(fmaf(tail, log2e, -shift));
  const float lse = row_max + logf(block_all_sum(sum, shared));
  if (me == 0) loss[row] = valid ? lse - picked : NAN;
  if (g == nullptr) return;
  const float lse2 = lse * log2e;
  for (int j = me; j < packs; j += threads) {
    const auto v = kept[j];
    const int at = body + j * Vec;
    packed<T, Vec> out;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float prob = exp2f(fmaf(to_float(v.v[k]), log2e, -lse2));
      out.v[k] = from_float<T>(at + k == hit ? prob - 1.0f : prob);
    }
    store<T, Vec>(g + at, out);
  }
  if (head_mine) {
    const float prob = exp2f(fmaf(head, log2e, -lse2));
    g[me] = from_float<T>(me == hit ? prob - 1.0f : prob);
  }
  if (tail_mine) {
    const float prob = exp2f(fmaf(tail, log2e, -lse2));
    g[tail_from + me] = from_float<T>(tail_from + me == hit ? prob - 1.0f : prob);
  }
}

// `attribute` of the current device, or `otherwise` when the runtime does not say.
std::int64_t device_attribute(cudaDeviceAttr attribute, std::int64_t otherwise) {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess)
    return otherwise;
  return value;
}

// The shared memory a block of the resident kernel may have on this device (the opt-in most).
std::int64_t resident_row_bytes() {
  const std::int64_t bytes = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  return bytes > 0 ? bytes - 32 * static_cast<std::int64_t>(sizeof(float)) : 0;  // less the reductions' own
}

// The resident kernel of T and Vec on `rows` rows. The first launch on a device lets the kernel
// have `most` bytes of dynamic shared memory there; that launch comes in a step run eagerly,
// never inside a CUDA graph's capture (where an attribute call is not to be made).
template <typename T, int Vec>
void launch_resident_cross_entropy(const T* x, const std::int64_t* targets, float* loss, T* g,
                                   std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                                   std::int64_t bytes, std::int64_t most, cudaStream_t stream) {
  constexpr int devices = 64;
  static std::atomic<bool> allowed[devices] = {};  // one per instantiation of this template
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < devices && !allowed[device].load()) {
    cudaFuncSetAttribute(cross_entropy_resident_kernel<T, Vec>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(most));
    allowed[device].store(true);
  }
  cross_entropy_resident_kernel<T, Vec>
      <<<static_cast<unsigned int>(rows), ce_resident_threads, static_cast<std::size_t>(bytes), stream>>>(
          x, targets, loss, g, static_cast<int>(cols), ignore_index);
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
  // Rows that start anywhere go in 16-byte groups when the gradient lies as the logits do; a
  // row's whole packs fit one block's shared memory or the row goes in two passes.
  const bool grouped =
      g == nullptr || (reinterpret_cast<std::uintptr_t>(g) - reinterpret_cast<std::uintptr_t>(x)) % 16 == 0;
  const std::int64_t group = grouped ? vec : 1;
  const std::int64_t bytes = (cols / group + 1) * group * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t most = resident_row_bytes();
  if (cols <= 2147483647LL && bytes <= most) {
    if (grouped) {
      launch_resident_cross_entropy<T, vec>(x, targets, loss, g, rows, cols, ignore_index, bytes, most,
                                            stream);
    } else {
      launch_resident_cross_entropy<T, 1>(x, targets, loss, g, rows, cols, ignore_index, bytes, most, stream);
    }
  } else if (cols % vec == 0 && aligned16(x) && (g == nullptr || aligned16(g))) {
    cross_entropy_kernel<T, vec><<<blocks, ce_threads, 0, stream>>>(x, targets, loss, g, cols, ignore_index);
  } else {
    cross_entropy_kernel<T, 1><<<blocks, ce_threads, 0, stream>>>(x, targets, loss, g, cols, ignore_index);
  }
  return static_cast<int>(cudaGetLastError());
}

// ---- The optimizer: AdamW and the gradient's sum of squares, many tensors a launch ----

// The index of the last of `count` table entries whose `first` field is at most `block`: the
// tensor a block of a multi-tensor launch works on (entries in order of `first`).
template <typename Entry, typename First>
__device__ __forceinline__ int entry_of(const Entry* table, int count, First Entry::*first,
                                        std::int64_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].*first <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Elements of one tensor an AdamW block updates: 16 groups of 4 a thread.
constexpr std::int64_t adamw_block_elements = threads_per_block * 4 * 16;

template <typename G, typename C, int Vec>
__device__ __forceinline__ void adamw_stretch(const adamw_tensor& t, std::int64_t begin, std::int64_t end,
                                              const adamw_scalars& s, float grad_scale) {
  const float decay = 1.0f - s.lr * s.weight_decay;
  const G* grad = static_cast<const G*>(t.grad);
  C* copy = static_cast<C*>(t.copy);
  for (std::int64_t at = begin + threadIdx.x * Vec; at < end;
       at += static_cast<std::int64_t>(blockDim.x) * Vec) {
    auto p = load<float, Vec>(t.param + at);
    auto m = load<float, Vec>(t.exp_avg + at);
    auto v = load<float, Vec>(t.exp_avg_sq + at);
    const auto g = load<G, Vec>(grad + at);
    packed<C, Vec> c;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const float gk = to_float(g.v[k]) * grad_scale;
      m.v[k] = s.beta1 * m.v[k] + s.one_minus_beta1 * gk;
      v.v[k] = s.beta2 * v.v[k] + s.one_minus_beta2 * gk * gk;
      const float denom = sqrtf(v.v[k]) / t.bias_correction2_sqrt + s.eps;
      p.v[k] = p.v[k] * decay - t.step_size * m.v[k] / denom;
      c.v[k] = from_float<C>(p.v[k]);
    }
    store<float, Vec>(t.param + at, p);
    store<float, Vec>(t.exp_avg + at, m);
    store<float, Vec>(t.exp_avg_sq + at, v);
    if (copy != nullptr) store<C, Vec>(copy + at, c);
  }
}

// Block b updates elements [j * adamw_block_elements, (j + 1) * adamw_block_elements) of the
// tensor it falls in, j = b - that tensor's first_block.
template <typename G, typename C>
__global__ void __launch_bounds__(threads_per_block)
    adamw_kernel(const adamw_tensor* __restrict__ tensors, int count, adamw_scalars s) {
  const adamw_tensor& t = tensors[entry_of(tensors, count, &adamw_tensor::first_block, blockIdx.x)];
  const float grad_scale =
      s.device_scale == nullptr ? s.grad_scale : s.grad_scale * static_cast<float>(*s.device_scale);
  const std::int64_t begin = (blockIdx.x - t.first_block) * adamw_block_elements;
  const std::int64_t end = begin + adamw_block_elements < t.n ? begin + adamw_block_elements : t.n;
  if (t.vectorised) {
    adamw_stretch<G, C, 4>(t, begin, end, s, grad_scale);
  } else {
    adamw_stretch<G, C, 1>(t, begin, end, s, grad_scale);
  }
}

template <typename G, typename C>
std::int64_t plan_adamw(adamw_tensor* tensors, int count) {
  std::int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    adamw_tensor& t = tensors[i];
    t.first_block = blocks;
    t.vectorised = t.n % 4 == 0 && aligned_to(t.param, 16) && aligned_to(t.exp_avg, 16) &&
                   aligned_to(t.exp_avg_sq, 16) && aligned_to(t.grad, sizeof(G) * 4) &&
                   aligned_to(t.copy, sizeof(C) * 4);
    blocks += (t.n + adamw_block_elements - 1) / adamw_block_elements;
  }
  return blocks;
}

template <typename G, typename C>
int launch_adamw(const adamw_tensor* tensors, int count, std::int64_t blocks, const adamw_scalars& s,
                 cudaStream_t stream) {
  if (blocks == 0) return 0;
  if (blocks > 0x7fffffffLL) return static_cast<int>(cudaErrorInvalidValue);
  adamw_kernel<G, C><<<static_cast<unsigned int>(blocks), threads_per_block, 0, stream>>>(tensors, count, s);
  return static_cast<int>(cudaGetLastError());
}

// Elements of one tensor a widening block converts: 4 groups of 8 a thread.
constexpr std::int64_t widen_block_elements = threads_per_block * 8 * 4;

template <typename T>
__global__ void __launch_bounds__(threads_per_block)
    widen_kernel(const widen_tensor* __restrict__ table, int count, float* __restrict__ out) {
  const widen_tensor& t = table[entry_of(table, count, &widen_tensor::first_block, blockIdx.x)];
  const T* x = static_cast<const T*>(t.x);
  float* o = out + t.offset;
  const std::int64_t begin = (blockIdx.x - t.first_block) * widen_block_elements;
  const std::int64_t end = begin + widen_block_elements < t.n ? begin + widen_block_elements : t.n;
  if (t.vectorised) {
    for (std::int64_t at = begin + threadIdx.x * 8; at < end; at += threads_per_block * 8) {
      const auto v = load<T, 8>(x + at);
      packed<float, 4> low, high;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        low.v[k] = to_float(v.v[k]);
        high.v[k] = to_float(v.v[k + 4]);
      }
      store<float, 4>(o + at, low);
      store<float, 4>(o + at + 4, high);
    }
  } else {
    for (std::int64_t at = begin + threadIdx.x; at < end; at += threads_per_block) o[at] = to_float(x[at]);
  }
}

template <typename T>
std::int64_t plan_widen(widen_tensor* tensors, int count, const float* out) {
  std::int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    widen_tensor& t = tensors[i];
    t.first_block = blocks;
    t.vectorised = t.n % 8 == 0 && aligned16(t.x) && aligned16(out + t.offset);
    blocks += (t.n + widen_block_elements - 1) / widen_block_elements;
  }
  return blocks;
}

template <typename T>
int launch_widen(const widen_tensor* tensors, int count, std::int64_t blocks, float* out,
                 cudaStream_t stream) {
  if (blocks == 0) return 0;
  if (blocks > 0x7fffffffLL) return static_cast<int>(cudaErrorInvalidValue);
  widen_kernel<T><<<static_cast<unsigned int>(blocks), threads_per_block, 0, stream>>>(tensors, count, out);
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

// Partial `part` of `parts` of the squares of n elements at x: groups part, part + parts, ...
// (groups of square_threads threads' Vec elements), in a fixed order.
template <typename T, int Vec>
__device__ double square_stride(const T* __restrict__ x, std::int64_t n, int part, int parts) {
  double sum = 0.0;
  const std::int64_t groups = n / Vec;
  for (std::int64_t i = part * static_cast<std::int64_t>(square_threads) + threadIdx.x; i < groups;
       i += static_cast<std::int64_t>(parts) * square_threads) {
    const auto v = load<T, Vec>(x + i * Vec);
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      const double f = to_float(v.v[k]);
      sum += f * f;
    }
  }
  return sum;
}

template <typename T>
__device__ double square_part(const square_tensor& t, int part) {
  const T* x = static_cast<const T*>(t.x);
  return t.vectorised ? square_stride<T, 16 / sizeof(T)>(x, t.n, part, t.partials)
                      : square_stride<T, 1>(x, t.n, part, t.partials);
}

__global__ void __launch_bounds__(square_threads)
    square_partials_kernel(const square_tensor* __restrict__ tensors, int count,
                           double* __restrict__ partials) {
  const square_tensor& t = tensors[entry_of(tensors, count, &square_tensor::first_partial, blockIdx.x)];
  const int part = static_cast<int>(blockIdx.x) - t.first_partial;
  double sum = 0.0;
  switch (t.type) {
    case dtype::bf16:
      sum = square_part<__nv_bfloat16>(t, part);
      break;
    case dtype::f16:
      sum = square_part<__half>(t, part);
      break;
    case dtype::f32:
      sum = square_part<float>(t, part);
      break;
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

// ---- Norms: RMSNorm and LayerNorm over rows, the residual add before them ----

// One block per row; each thread holds up to K groups of Vec elements of the row in registers, so
// that the row is read from memory once (K = 1 up to norm_max_threads groups, 2, 4 beyond).
constexpr int norm_max_threads = 1024;
constexpr std::int64_t norm_max_groups = 4 * norm_max_threads;
constexpr int norm_param_rows = 8;    // rows of threads in the weight-gradient kernels
constexpr std::int64_t norm_most_chunks = 128;
// Rows the backward's one-pass kernel takes (norm_backward_fused_kernel): its slots' sums go
// through shared memory of this many floats.
constexpr std::int64_t norm_fused_most_cols = 4096;

// Vec weights (or biases) from element c on, `fallback` where the pointer is null.
template <typename T, int Vec>
__device__ __forceinline__ void load_or(const T* p, std::int64_t c, float fallback, float (&out)[Vec]) {
  if (p == nullptr) {
#pragma unroll
    for (int k = 0; k < Vec; ++k) out[k] = fallback;
    return;
  }
  const auto v = load<T, Vec>(p + c);
#pragma unroll
  for (int k = 0; k < Vec; ++k) out[k] = to_float(v.v[k]);
}

template <typename T, int Vec, int K, bool Layer>
__global__ void __launch_bounds__(norm_max_threads)
    norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ residual, T* __restrict__ sum,
                        const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ y,
                        float* __restrict__ mean_out, float* __restrict__ rstd_out, std::int64_t rows,
                        std::int64_t cols, float eps) {
  __shared__ float shared[32];
  const std::int64_t groups = cols / Vec;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t base = row * cols;
    float h[K][Vec];
    float total = 0.0f, squares = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int64_t c = (threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x) * Vec;
      if (c < cols) {
        auto v = load<T, Vec>(x + base + c);
        if (residual != nullptr) {
          const auto r = load<T, Vec>(residual + base + c);
#pragma unroll
          for (int k = 0; k < Vec; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + to_float(r.v[k]));
          store<T, Vec>(sum + base + c, v);
        }
#pragma unroll
        for (int k = 0; k < Vec; ++k) {
          h[j][k] = to_float(v.v[k]);
          total += h[j][k];
          squares += h[j][k] * h[j][k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < Vec; ++k) h[j][k] = 0.0f;
      }
    }
    float mean = 0.0f, variance = 0.0f;
    if (Layer) {
      mean = block_all_sum(total, shared) * inv_cols;
      float centred = 0.0f;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        if ((threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x) >= groups) continue;
#pragma unroll
        for (int k = 0; k < Vec; ++k) centred += (h[j][k] - mean) * (h[j][k] - mean);
      }
      variance = block_all_sum(centred, shared) * inv_cols;
    } else {
      variance = block_all_sum(squares, shared) * inv_cols;
    }
    const float rstd = rsqrtf(variance + eps);
    if (threadIdx.x == 0) {
      rstd_out[row] = rstd;
      if (Layer) mean_out[row] = mean;
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int64_t c = (threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x) * Vec;
      if (c >= cols) continue;
      float w[Vec], b[Vec];
      load_or<T, Vec>(weight, c, 1.0f, w);
      load_or<T, Vec>(bias, c, 0.0f, b);
      packed<T, Vec> out;
#pragma unroll
      for (int k = 0; k < Vec; ++k) out.v[k] = from_float<T>((h[j][k] - mean) * rstd * w[k] + b[k]);
      store<T, Vec>(y + base + c, out);
    }
  }
}

// The input's gradient, one block per row: with g = dy * w and xhat = (h - mean) * rstd,
//   LayerNorm: dh = rstd (g - mean(g) - xhat mean(g xhat)),  RMSNorm: dh = rstd (g - xhat mean(g xhat)),
// plus grad_sum (the gradient h gets from its other uses) where not null.
template <typename T, int Vec, int K, bool Layer>
__global__ void __launch_bounds__(norm_max_threads)
    norm_backward_input_kernel(const T* __restrict__ dy, const T* __restrict__ h,
                               const T* __restrict__ weight, const float* __restrict__ mean,
                               const float* __restrict__ rstd, const T* __restrict__ grad_sum,
                               T* __restrict__ grad_h, std::int64_t rows, std::int64_t cols) {
  __shared__ float shared[32];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t base = row * cols;
    const float m = Layer ? mean[row] : 0.0f, r = rstd[row];
    float g[K][Vec], xhat[K][Vec];
    float g_total = 0.0f, gx_total = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int64_t c = (threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x) * Vec;
      if (c < cols) {
        const auto d = load<T, Vec>(dy + base + c);
        const auto v = load<T, Vec>(h + base + c);
        float w[Vec];
        load_or<T, Vec>(weight, c, 1.0f, w);
#pragma unroll
        for (int k = 0; k < Vec; ++k) {
          g[j][k] = to_float(d.v[k]) * w[k];
          xhat[j][k] = (to_float(v.v[k]) - m) * r;
          g_total += g[j][k];
          gx_total += g[j][k] * xhat[j][k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < Vec; ++k) g[j][k] = xhat[j][k] = 0.0f;
      }
    }
    const float g_mean = Layer ? block_all_sum(g_total, shared) * inv_cols : 0.0f;
    const float gx_mean = block_all_sum(gx_total, shared) * inv_cols;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int64_t c = (threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x) * Vec;
      if (c >= cols) continue;
      float extra[Vec];
      load_or<T, Vec>(grad_sum == nullptr ? nullptr : grad_sum + base, c, 0.0f, extra);
      packed<T, Vec> out;
#pragma unroll
      for (int k = 0; k < Vec; ++k) out.v[k] = from_float<T>(r * (g[j][k] - g_mean - xhat[j][k] * gx_mean) + extra[k]);
      store<T, Vec>(grad_h + base + c, out);
    }
  }
}

// A barrier of this slot's threads alone: named barrier 1 + slot (0 is __syncthreads'), so that
// a block's slots go through their rows without waiting for one another's loads.
__device__ __forceinline__ void slot_barrier(int slot, int slot_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(slot + 1), "r"(slot_threads) : "memory");
}

// The sums of a and b over the threads of this thread's slot (slot_threads consecutive threads,
// whole warps, at most 15 slots), the same values in each of them. shared: 64 floats of the
// caller's, each slot using its own warps' entries.
__device__ __forceinline__ float2 slot_sums(float a, float b, int slot, int slot_threads, float* shared) {
  a = warp_sum(a);
  b = warp_sum(b);
  slot_barrier(slot, slot_threads);  // the slot's previous readers are done with its entries
  if (threadIdx.x % 32 == 0) {
    shared[threadIdx.x / 32] = a;
    shared[32 + threadIdx.x / 32] = b;
  }
  slot_barrier(slot, slot_threads);
  const int slot_warps = slot_threads / 32;
  float2 total = make_float2(0.0f, 0.0f);
  for (int w = slot * slot_warps; w < (slot + 1) * slot_warps; ++w) {
    total.x += shared[w];
    total.y += shared[32 + w];
  }
  return total;
}

// The sum over the block's slots, in slot order, of each thread's v (columns c to c + Vec of its
// slot), written by slot 0 to out[c...]. sums: shared floats, one per column.
template <int Vec>
__device__ __forceinline__ void slots_in_order(const float (&v)[Vec], float* out, float* sums, int slot,
                                               int slots, std::int64_t c, bool mine) {
  for (int s = 0; s < slots; ++s) {
    if (slot == s && mine) {
#pragma unroll
      for (int k = 0; k < Vec; ++k) sums[c + k] = (s == 0 ? 0.0f : sums[c + k]) + v[k];
    }
    __syncthreads();
  }
  if (slot == 0 && mine) {
#pragma unroll
    for (int k = 0; k < Vec; ++k) out[c + k] = sums[c + k];
  }
  __syncthreads();  // before `sums` is written again
}

// The input's gradient as norm_backward_input_kernel computes it, and the weight's and bias's
// partial sums in the same pass, for rows of at most norm_fused_most_cols: a block of `slots` row
// slots of slot_threads threads (one group of Vec each) strides over the rows, each thread adding
// dy xhat and dy for its columns as it goes; at the end the slots' sums are added in slot order
// and the block writes its partials (gridDim.x chunks, laid out as norm_param_partials_kernel's)
// for norm_param_sum_kernel. dy and h are read once instead of twice.
template <typename T, int Vec, bool Layer>
__global__ void __launch_bounds__(norm_max_threads)
    norm_backward_fused_kernel(const T* __restrict__ dy, const T* __restrict__ h,
                               const T* __restrict__ weight, const float* __restrict__ mean,
                               const float* __restrict__ rstd, const T* __restrict__ grad_sum,
                               T* __restrict__ grad_h, float* __restrict__ partials, std::int64_t rows,
                               std::int64_t cols, int slot_threads) {
  __shared__ float shared[64];
  __shared__ float sums[norm_fused_most_cols];
  const int slots = static_cast<int>(blockDim.x) / slot_threads;
  const int slot = static_cast<int>(threadIdx.x) / slot_threads;
  const std::int64_t c = static_cast<std::int64_t>(threadIdx.x % slot_threads) * Vec;
  const bool mine = c < cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float w[Vec], dw[Vec], db[Vec];
#pragma unroll
  for (int k = 0; k < Vec; ++k) dw[k] = db[k] = 0.0f;
  if (mine) {
    load_or<T, Vec>(weight, c, 1.0f, w);
  } else {
#pragma unroll
    for (int k = 0; k < Vec; ++k) w[k] = 0.0f;
  }
  for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * slots; first < rows;
       first += static_cast<std::int64_t>(gridDim.x) * slots) {
    const std::int64_t row = first + slot;
    const bool here = mine && row < rows;
    const std::int64_t at = row * cols + c;
    float d[Vec], xhat[Vec];
    float g_total = 0.0f, gx_total = 0.0f;
    if (here) {
      const float m = Layer ? mean[row] : 0.0f, r = rstd[row];
      const auto dv = load<T, Vec>(dy + at);
      const auto hv = load<T, Vec>(h + at);
#pragma unroll
      for (int k = 0; k < Vec; ++k) {
        d[k] = to_float(dv.v[k]);
        xhat[k] = (to_float(hv.v[k]) - m) * r;
        g_total += d[k] * w[k];
        gx_total += d[k] * w[k] * xhat[k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < Vec; ++k) d[k] = xhat[k] = 0.0f;
    }
    const float2 total = slot_sums(g_total, gx_total, slot, slot_threads, shared);
    if (!here) continue;
    const float g_mean = Layer ? total.x * inv_cols : 0.0f, gx_mean = total.y * inv_cols;
    const float r = rstd[row];
    float extra[Vec];
    load_or<T, Vec>(grad_sum == nullptr ? nullptr : grad_sum + row * cols, c, 0.0f, extra);
    packed<T, Vec> out;
#pragma unroll
    for (int k = 0; k < Vec; ++k) {
      out.v[k] = from_float<T>(r * (d[k] * w[k] - g_mean - xhat[k] * gx_mean) + extra[k]);
      dw[k] += d[k] * xhat[k];
      db[k] += d[k];
    }
    store<T, Vec>(grad_h + at, out);
  }
  // The slots' sums in slot order, the weight's then the bias's.
  float* out = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * cols;
  slots_in_order<Vec>(dw, out, sums, slot, slots, c, mine);
  slots_in_order<Vec>(db, out + cols, sums, slot, slots, c, mine);
}

// The derivative of the tanh GELU, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), at
// x: ATen's formula for gelu_backward(approximate="tanh").
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  constexpr float beta = 0.7978845608028654f, kappa = 0.044715f;
  const float x_sq = x * x, x_cube = x_sq * x;
  const float t = tanhf(beta * (x + kappa * x_cube));
  const float left = 0.5f * x, right = 1.0f + t;
  return 0.5f * right + left * (1.0f - t * t) * beta * (1.0f + 3.0f * kappa * x_sq);
}

// GELU's backward of one group: grad_in = dy gelu_tanh'(h), rounded to T, stored; its values
// added to db.
template <typename T, int Vec>
__device__ __forceinline__ void gelu_backward_group(const packed<T, Vec>& dy, const packed<T, Vec>& h,
                                                    T* grad_in, float (&db)[Vec]) {
  packed<T, Vec> d;
#pragma unroll
  for (int k = 0; k < Vec; ++k) {
    d.v[k] = from_float<T>(to_float(dy.v[k]) * gelu_tanh_grad(to_float(h.v[k])));
    db[k] += to_float(d.v[k]);
  }
  store<T, Vec>(grad_in, d);
}

// The weight's and bias's gradients, first as partial sums: block (x, y) takes columns
// [32 Vec x, 32 Vec (x + 1)) of the rows of chunk y; its threads of one threadIdx.y take every
// norm_param_rows-th row; the rows of threads are then added in order. partials (chunks, 2, cols):
// Σ dy·xhat, then Σ dy. Without Weight (column sums alone: h, mean and rstd unused) the first
// half is left as it was. With Gelu (and without Weight) it is GELU's backward as well: h is
// GELU's input, grad_in is written with dy gelu_tanh'(h) rounded to T, and the column sums are of
// grad_in (the gradient of a bias added before the GELU).
template <typename T, int Vec, bool Layer, bool Weight = true, bool Gelu = false>
__global__ void __launch_bounds__(32 * norm_param_rows)
    norm_param_partials_kernel(const T* __restrict__ dy, const T* __restrict__ h,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               float* __restrict__ partials, std::int64_t rows, std::int64_t cols,
                               std::int64_t rows_per_chunk, T* __restrict__ grad_in = nullptr) {
  __shared__ float dw_rows[norm_param_rows][32 * Vec], db_rows[norm_param_rows][32 * Vec];
  const std::int64_t c = (blockIdx.x * 32LL + threadIdx.x) * Vec;
  const std::int64_t begin = blockIdx.y * rows_per_chunk;
  const std::int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float dw[Vec], db[Vec];
#pragma unroll
  for (int k = 0; k < Vec; ++k) dw[k] = db[k] = 0.0f;
  if constexpr (Gelu) {
    // Two of the thread's rows at a time, in its order: both rows' loads go out before either's
    // arithmetic (GELU's tanh) and stores.
    for (std::int64_t row = begin + threadIdx.y; c < cols && row < end; row += 2 * norm_param_rows) {
      const std::int64_t next = row + norm_param_rows;
      const auto d0 = load<T, Vec>(dy + row * cols + c);
      const auto v0 = load<T, Vec>(h + row * cols + c);
      packed<T, Vec> d1{}, v1{};
      if (next < end) {
        d1 = load<T, Vec>(dy + next * cols + c);
        v1 = load<T, Vec>(h + next * cols + c);
      }
      gelu_backward_group<T, Vec>(d0, v0, grad_in + row * cols + c, db);
      if (next < end) gelu_backward_group<T, Vec>(d1, v1, grad_in + next * cols + c, db);
    }
  } else if (c < cols) {
    for (std::int64_t row = begin + threadIdx.y; row < end; row += norm_param_rows) {
      const auto d = load<T, Vec>(dy + row * cols + c);
      if (Weight) {
        const float m = Layer ? mean[row] : 0.0f, r = rstd[row];
        const auto v = load<T, Vec>(h + row * cols + c);
#pragma unroll
        for (int k = 0; k < Vec; ++k) dw[k] += to_float(d.v[k]) * (to_float(v.v[k]) - m) * r;
      }
#pragma unroll
      for (int k = 0; k < Vec; ++k) db[k] += to_float(d.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < Vec; ++k) {
    dw_rows[threadIdx.y][threadIdx.x * Vec + k] = dw[k];
    db_rows[threadIdx.y][threadIdx.x * Vec + k] = db[k];
  }
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float* out_w = partials + blockIdx.y * 2 * cols;
  float* out_b = out_w + cols;
#pragma unroll
  for (int k = 0; k < Vec; ++k) {
    float w = 0.0f, b = 0.0f;
    for (int y = 0; y < norm_param_rows; ++y) {
      w += dw_rows[y][threadIdx.x * Vec + k];
      b += db_rows[y][threadIdx.x * Vec + k];
    }
    if (Weight) out_w[c + k] = w;
    out_b[c + k] = b;
  }
}

// The chunks' partial sums added up: block x takes 32 columns, its threads of one threadIdx.y
// every norm_param_rows-th chunk in order, then the rows of threads are added in order.
template <typename T>
__global__ void __launch_bounds__(32 * norm_param_rows)
    norm_param_sum_kernel(const float* __restrict__ partials, T* __restrict__ grad_weight,
                          T* __restrict__ grad_bias, std::int64_t chunks, std::int64_t cols) {
  __shared__ float w_rows[norm_param_rows][32], b_rows[norm_param_rows][32];
  const std::int64_t c = blockIdx.x * 32LL + threadIdx.x;
  float w = 0.0f, b = 0.0f;
  if (c < cols) {
    for (std::int64_t j = threadIdx.y; j < chunks; j += norm_param_rows) {
      if (grad_weight != nullptr) w += partials[2 * j * cols + c];
      b += partials[(2 * j + 1) * cols + c];
    }
  }
  w_rows[threadIdx.y][threadIdx.x] = w;
  b_rows[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  w = b = 0.0f;
  for (int y = 0; y < norm_param_rows; ++y) {
    w += w_rows[y][threadIdx.x];
    b += b_rows[y][threadIdx.x];
  }
  if (grad_weight != nullptr) grad_weight[c] = from_float<T>(w);
  if (grad_bias != nullptr) grad_bias[c] = from_float<T>(b);
}

std::int64_t norm_chunks(std::int64_t rows) {
  const std::int64_t chunks = (rows + 63) / 64;
  return chunks < 1 ? 1 : (chunks > norm_most_chunks ? norm_most_chunks : chunks);
}

// The launch shape of a one-row-per-block kernel over `groups` groups a row: threads (a multiple
// of 32, at most norm_max_threads) and K, the groups each thread holds.
struct norm_shape {
  unsigned int blocks, threads;
  int k;
};

norm_shape norm_shape_for(std::int64_t rows, std::int64_t groups) {
  const int k = groups <= norm_max_threads ? 1 : (groups <= 2 * norm_max_threads ? 2 : 4);
  std::int64_t threads = (groups + k - 1) / k;
  threads = (threads + 31) / 32 * 32;
  constexpr std::int64_t most_blocks = 1 << 20;
  return {static_cast<unsigned int>(rows < most_blocks ? rows : most_blocks), static_cast<unsigned int>(threads), k};
}

// f(std::integral_constant<int, K>) for the shape's K.
template <class F>
void with_k(int k, F&& f) {
  if (k == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (k == 2) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, 4>{});
  }
}

template <typename T, int Vec>
void launch_norm_forward_kernel(bool layer, const T* x, const T* residual, T* sum, const T* weight,
                                const T* bias, T* y, float* mean, float* rstd, std::int64_t rows,
                                std::int64_t cols, float eps, cudaStream_t stream) {
  const norm_shape shape = norm_shape_for(rows, cols / Vec);
  with_k(shape.k, [&](auto k) {
    constexpr int K = decltype(k)::value;
    if (layer) {
      norm_forward_kernel<T, Vec, K, true><<<shape.blocks, shape.threads, 0, stream>>>(
          x, residual, sum, weight, bias, y, mean, rstd, rows, cols, eps);
    } else {
      norm_forward_kernel<T, Vec, K, false><<<shape.blocks, shape.threads, 0, stream>>>(
          x, residual, sum, weight, bias, y, mean, rstd, rows, cols, eps);
    }
  });
}

// The vector width of a row of `cols` T at these pointers: 16 bytes where every row starts
// 16-byte aligned, else 1; 0 where a row has more groups than the kernels hold.
template <typename T>
int norm_vec(std::int64_t cols, bool aligned) {
  constexpr int vec = 16 / sizeof(T);
  const int v = cols % vec == 0 && aligned ? vec : 1;
  return cols / v <= norm_max_groups ? v : 0;
}

template <typename T>
int launch_norm_forward(bool layer, const void* x, const void* residual, void* sum, const void* weight,
                        const void* bias, void* y, float* mean, float* rstd, std::int64_t rows,
                        std::int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  if ((residual == nullptr) != (sum == nullptr) || (layer && mean == nullptr) || rstd == nullptr)
    return static_cast<int>(cudaErrorInvalidValue);
  const T* xt = static_cast<const T*>(x);
  const T* rt = static_cast<const T*>(residual);
  T* st = static_cast<T*>(sum);
  const T* wt = static_cast<const T*>(weight);
  const T* bt = static_cast<const T*>(bias);
  T* yt = static_cast<T*>(y);
  const int vec = norm_vec<T>(cols, aligned16(xt) && aligned_to(rt, 16) && aligned_to(st, 16) &&
                                        aligned_to(wt, 16) && aligned_to(bt, 16) && aligned16(yt));
  if (vec == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (vec > 1) {
    launch_norm_forward_kernel<T, 16 / sizeof(T)>(layer, xt, rt, st, wt, bt, yt, mean, rstd, rows, cols, eps, stream);
  } else {
    launch_norm_forward_kernel<T, 1>(layer, xt, rt, st, wt, bt, yt, mean, rstd, rows, cols, eps, stream);
  }
  return static_cast<int>(cudaGetLastError());
}

// The one-pass backward's launch (norm_backward_fused_kernel): row slots of whole warps, as
// many as a block of norm_max_threads holds (at most norm_fused_most_slots), and a block per
// multiprocessor, fewer when the rows are fewer. {0, 0, 0} where it does not apply: the
// parameters' gradients not wanted, or rows longer than it takes.
constexpr int norm_fused_most_slots = 8;

struct fused_shape {
  unsigned int blocks = 0, threads = 0;
  int slot_threads = 0;
};

std::int64_t multiprocessors() {
  const std::int64_t count = device_attribute(cudaDevAttrMultiProcessorCount, 1);
  return count < 1 ? 1 : count;
}

fused_shape fused_shape_for(bool params, std::int64_t rows, std::int64_t cols, int vec) {
  const std::int64_t groups = cols / vec;
  if (!params || cols > norm_fused_most_cols || groups > norm_max_threads) return {};
  const int slot_threads = static_cast<int>((groups + 31) / 32 * 32);
  int slots = norm_max_threads / slot_threads;
  if (slots > norm_fused_most_slots) slots = norm_fused_most_slots;
  const std::int64_t wanted = (rows + slots - 1) / slots, most = multiprocessors();
  return {static_cast<unsigned int>(wanted < most ? wanted : most),
          static_cast<unsigned int>(slots * slot_threads), slot_threads};
}

// The input's gradient and, when `params`, the parameters' partial sums into scratch; returns the
// number of chunks of partials written (0 without params).
template <typename T, int Vec>
std::int64_t launch_norm_backward_kernels(bool layer, const T* dy, const T* h, const T* weight,
                                          const float* mean, const float* rstd, const T* grad_sum, T* grad_h,
                                          bool params, float* scratch, std::int64_t rows, std::int64_t cols,
                                          cudaStream_t stream) {
  const fused_shape fused = fused_shape_for(params, rows, cols, Vec);
  if (fused.blocks > 0) {
    if (layer) {
      norm_backward_fused_kernel<T, Vec, true><<<fused.blocks, fused.threads, 0, stream>>>(
          dy, h, weight, mean, rstd, grad_sum, grad_h, scratch, rows, cols, fused.slot_threads);
    } else {
      norm_backward_fused_kernel<T, Vec, false><<<fused.blocks, fused.threads, 0, stream>>>(
          dy, h, weight, mean, rstd, grad_sum, grad_h, scratch, rows, cols, fused.slot_threads);
    }
    return fused.blocks;
  }
  const norm_shape shape = norm_shape_for(rows, cols / Vec);
  with_k(shape.k, [&](auto k) {
    constexpr int K = decltype(k)::value;
    if (layer) {
      norm_backward_input_kernel<T, Vec, K, true><<<shape.blocks, shape.threads, 0, stream>>>(
          dy, h, weight, mean, rstd, grad_sum, grad_h, rows, cols);
    } else {
      norm_backward_input_kernel<T, Vec, K, false><<<shape.blocks, shape.threads, 0, stream>>>(
          dy, h, weight, mean, rstd, grad_sum, grad_h, rows, cols);
    }
  });
  if (!params) return 0;
  const std::int64_t chunks = norm_chunks(rows);
  const std::int64_t per_chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned int>((cols + 32 * Vec - 1) / (32 * Vec)), static_cast<unsigned int>(chunks));
  const dim3 block(32, norm_param_rows);
  if (layer) {
    norm_param_partials_kernel<T, Vec, true><<<grid, block, 0, stream>>>(dy, h, mean, rstd, scratch, rows,
                                                                         cols, per_chunk);
  } else {
    norm_param_partials_kernel<T, Vec, false><<<grid, block, 0, stream>>>(dy, h, mean, rstd, scratch, rows,
                                                                          cols, per_chunk);
  }
  return chunks;
}

template <typename T>
int launch_norm_backward(bool layer, const void* grad_y, const void* h, const void* weight, const float* mean,
                         const float* rstd, const void* grad_sum, void* grad_h, void* grad_weight,
                         void* grad_bias, float* scratch, std::int64_t rows, std::int64_t cols,
                         cudaStream_t stream) {
  if (cols == 0) return 0;
  const bool params = grad_weight != nullptr || grad_bias != nullptr;
  if ((layer && mean == nullptr) || rstd == nullptr || (params && scratch == nullptr))
    return static_cast<int>(cudaErrorInvalidValue);
  T* gw = static_cast<T*>(grad_weight);
  T* gb = static_cast<T*>(grad_bias);
  if (rows == 0) {  // no rows: the parameters' gradients are zero
    if (gw != nullptr) cudaMemsetAsync(gw, 0, static_cast<std::size_t>(cols) * sizeof(T), stream);
    if (gb != nullptr) cudaMemsetAsync(gb, 0, static_cast<std::size_t>(cols) * sizeof(T), stream);
    return static_cast<int>(cudaGetLastError());
  }
  const T* dy = static_cast<const T*>(grad_y);
  const T* ht = static_cast<const T*>(h);
  const T* wt = static_cast<const T*>(weight);
  const T* gs = static_cast<const T*>(grad_sum);
  T* gh = static_cast<T*>(grad_h);
  const int vec = norm_vec<T>(cols, aligned16(dy) && aligned16(ht) && aligned_to(wt, 16) && aligned_to(gs, 16) &&
                                        aligned16(gh));
  if (vec == 0) return static_cast<int>(cudaErrorInvalidValue);
  const std::int64_t chunks =
      vec > 1 ? launch_norm_backward_kernels<T, 16 / sizeof(T)>(layer, dy, ht, wt, mean, rstd, gs, gh, params,
                                                                scratch, rows, cols, stream)
              : launch_norm_backward_kernels<T, 1>(layer, dy, ht, wt, mean, rstd, gs, gh, params, scratch,
                                                   rows, cols, stream);
  if (params) {
    const unsigned int blocks = static_cast<unsigned int>((cols + 31) / 32);
    norm_param_sum_kernel<T><<<blocks, dim3(32, norm_param_rows), 0, stream>>>(scratch, gw, gb, chunks, cols);
  }
  return static_cast<int>(cudaGetLastError());
}

// The column sums of x (rows, cols) through the bias half of the norms' partials; with Gelu, of
// GELU's backward (x the output's gradient, h its input), which it writes into grad_in as well
// (see norm_param_partials_kernel's Gelu).
template <typename T, int Vec, bool Gelu>
void launch_column_partials(const T* x, const T* h, T* grad_in, float* scratch, std::int64_t rows,
                            std::int64_t cols, cudaStream_t stream) {
  const std::int64_t chunks = norm_chunks(rows);
  const std::int64_t per_chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned int>((cols + 32 * Vec - 1) / (32 * Vec)), static_cast<unsigned int>(chunks));
  norm_param_partials_kernel<T, Vec, false, false, Gelu><<<grid, dim3(32, norm_param_rows), 0, stream>>>(
      x, h, nullptr, nullptr, scratch, rows, cols, per_chunk, grad_in);
}

// launch_column_partials, vectorised where the columns and pointers allow.
template <typename T, bool Gelu>
void launch_column_partials_of(const T* x, const T* h, T* grad_in, float* scratch, std::int64_t rows,
                               std::int64_t cols, cudaStream_t stream) {
  constexpr int vec = 16 / sizeof(T);
  if (cols % vec == 0 && aligned16(x) && (!Gelu || (aligned16(h) && aligned16(grad_in)))) {
    launch_column_partials<T, vec, Gelu>(x, h, grad_in, scratch, rows, cols, stream);
  } else {
    launch_column_partials<T, 1, Gelu>(x, h, grad_in, scratch, rows, cols, stream);
  }
}

// out = the column sums of x, or with h (and grad_in) of GELU's backward of x at h.
template <typename T>
int launch_column_sum(const void* x, const void* h, void* grad_in, void* out, float* scratch,
                      std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols == 0) return 0;
  T* o = static_cast<T*>(out);
  if (rows == 0) {
    cudaMemsetAsync(o, 0, static_cast<std::size_t>(cols) * sizeof(T), stream);
    return static_cast<int>(cudaGetLastError());
  }
  const T* xt = static_cast<const T*>(x);
  const T* ht = static_cast<const T*>(h);
  T* gi = static_cast<T*>(grad_in);
  if (ht != nullptr) {
    launch_column_partials_of<T, true>(xt, ht, gi, scratch, rows, cols, stream);
  } else {
    launch_column_partials_of<T, false>(xt, nullptr, nullptr, scratch, rows, cols, stream);
  }
  norm_param_sum_kernel<T>
      <<<static_cast<unsigned int>((cols + 31) / 32), dim3(32, norm_param_rows), 0, stream>>>(
          scratch, nullptr, o, norm_chunks(rows), cols);
  return static_cast<int>(cudaGetLastError());
}

// Calls f with a value of the element type `type` names.
template <class F>
auto with_element_type(dtype type, F&& f) -> decltype(f(float{})) {
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

int rotary_half(direction dir, dtype type, const column_parts& in, const column_parts& out, const float* cos,
                const float* sin, std::int64_t rows, std::int64_t rot_cols, std::int64_t head_dim,
                std::int64_t seq_len, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_rotary<decltype(element)>(dir, in, out, cos, sin, rows, rot_cols, head_dim, seq_len,
                                            static_cast<cudaStream_t>(stream));
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

std::int64_t adamw_blocks(dtype grad_type, dtype copy_type, adamw_tensor* tensors, int count) {
  return with_element_type(grad_type, [&](auto g) {
    return with_element_type(copy_type,
                             [&](auto c) { return plan_adamw<decltype(g), decltype(c)>(tensors, count); });
  });
}

int adamw(dtype grad_type, dtype copy_type, const adamw_tensor* device_tensors, int count,
          std::int64_t blocks, const adamw_scalars& scalars, void* stream) {
  return with_element_type(grad_type, [&](auto g) {
    return with_element_type(copy_type, [&](auto c) {
      return launch_adamw<decltype(g), decltype(c)>(device_tensors, count, blocks, scalars,
                                                    static_cast<cudaStream_t>(stream));
    });
  });
}

std::int64_t widen_blocks(dtype type, widen_tensor* tensors, int count, const float* out) {
  return with_element_type(type,
                           [&](auto element) { return plan_widen<decltype(element)>(tensors, count, out); });
}

int widen(dtype type, const widen_tensor* device_tensors, int count, std::int64_t blocks, float* out,
          void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_widen<decltype(element)>(device_tensors, count, blocks, out,
                                           static_cast<cudaStream_t>(stream));
  });
}

int square_partial_blocks(square_tensor* tensors, int count) {
  int total = 0;
  for (int i = 0; i < count; ++i) {
    square_tensor& t = tensors[i];
    const std::int64_t vec = t.type == dtype::f32 ? 4 : 8;
    t.vectorised = t.n % vec == 0 && aligned16(t.x);
    const std::int64_t groups = t.vectorised ? t.n / vec : t.n;
    const std::int64_t wanted = (groups + square_threads - 1) / square_threads;
    t.first_partial = total;
    t.partials = static_cast<int>(wanted < square_sum_partials ? wanted : square_sum_partials);
    total += t.partials;
  }
  return total;
}

int square_partials(const square_tensor* device_tensors, int count, int total, double* partials,
                    void* stream) {
  if (total == 0) return 0;
  square_partials_kernel<<<static_cast<unsigned int>(total), square_threads, 0,
                           static_cast<cudaStream_t>(stream)>>>(device_tensors, count, partials);
  return static_cast<int>(cudaGetLastError());
}

int sum_partials(const double* partials, int count, double* out, void* stream) {
  sum_partials_kernel<<<1, square_threads, 0, static_cast<cudaStream_t>(stream)>>>(partials, count, out);
  return static_cast<int>(cudaGetLastError());
}

int norm_forward(norm_type kind, dtype type, const void* x, const void* residual, void* sum,
                 const void* weight, const void* bias, void* y, float* mean, float* rstd,
                 std::int64_t rows, std::int64_t cols, float eps, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_norm_forward<decltype(element)>(kind == norm_type::layer, x, residual, sum, weight, bias, y,
                                                  mean, rstd, rows, cols, eps, static_cast<cudaStream_t>(stream));
  });
}

std::int64_t norm_backward_scratch(std::int64_t rows, std::int64_t cols) {
  const std::int64_t most = multiprocessors();
  const std::int64_t fused = rows < most ? rows : most;  // fused_shape_for's most
  return (fused > norm_chunks(rows) ? fused : norm_chunks(rows)) * 2 * cols;
}

int column_sum(dtype type, const void* x, void* out, float* scratch, std::int64_t rows, std::int64_t cols,
               void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_column_sum<decltype(element)>(x, nullptr, nullptr, out, scratch, rows, cols,
                                                static_cast<cudaStream_t>(stream));
  });
}

int gelu_tanh_backward(dtype type, const void* grad_out, const void* h, void* grad_in, void* bias_grad,
                       float* scratch, std::int64_t rows, std::int64_t cols, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_column_sum<decltype(element)>(grad_out, h, grad_in, bias_grad, scratch, rows, cols,
                                                static_cast<cudaStream_t>(stream));
  });
}

std::int64_t norm_max_cols(dtype type, bool vectorised) {
  const std::int64_t per_group = vectorised ? 16 / (type == dtype::f32 ? 4 : 2) : 1;
  return norm_max_groups * per_group;
}

int norm_backward(norm_type kind, dtype type, const void* grad_y, const void* h, const void* weight,
                  const float* mean, const float* rstd, const void* grad_sum, void* grad_h,
                  void* grad_weight, void* grad_bias, float* scratch, std::int64_t rows,
                  std::int64_t cols, void* stream) {
  return with_element_type(type, [&](auto element) {
    return launch_norm_backward<decltype(element)>(kind == norm_type::layer, grad_y, h, weight, mean, rstd,
                                                   grad_sum, grad_h, grad_weight, grad_bias, scratch, rows,
                                                   cols, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace cohort::core::model::kernels
