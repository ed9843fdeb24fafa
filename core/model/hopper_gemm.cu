// cohort's own Hopper GEMM (hopper_gemm.hpp states its contract). Built for sm_90a only (wgmma,
// setmaxnreg): core/model/CMakeLists.txt compiles this file on its own for that target.
#include "core/model/hopper_gemm.hpp"

#include <cuda.h>  // CUtensorMap and its encoder's type; the encoder is fetched from the driver
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/model/rotary_math.cuh"
#include "core/model/swiglu_math.cuh"

namespace cohort::core::model::kernels {
namespace {

constexpr int block_m = 128, block_n = 256;
constexpr int chunk_bytes = 64 * 64 * 2;       // a 64 x 64 piece of the output: one TMA store
constexpr int staged_bytes = 4 * chunk_bytes;  // a consumer's 64 x 256 result
constexpr int group_m = 16;                    // tiles along the rows that share the weights' tiles in L2
constexpr int threads = 384;                   // warpgroup 0 loads and stores; 1 and 2 multiply

// What a tile's result becomes: the product; SwiGLU's forward (the product is gate | up, and h
// beside it); SwiGLU's backward (the product is dh, and d gate | d up are written from it and the
// forward's gate | up); rotary (the product is q | k | v, written apart, q's and k's heads turned).
enum class epilogue { plain, swiglu, swiglu_backward, rotary };

// The shared memory of each epilogue: the stages, each consumer's staged result, the epilogue's
// own buffers, then the barriers. SwiGLU's backward reads gate | up by TMA into two buffers of a
// piece of each a consumer (64 KiB in all), which it makes room for with stages of 32 k-steps:
// four of them (96 KiB) where the others have three of 64 (144 KiB).
template <epilogue E>
struct geometry {
  static constexpr bool backward = E == epilogue::swiglu_backward;
  static constexpr int block_k = backward ? 32 : 64, stages = backward ? 4 : 3;
  // The store warps: one for each consumer (warps 1 and 2), or for SwiGLU's backward, whose
  // epilogue's arithmetic one warp could not keep up with, the three after the loading warp for
  // both consumers' results together (in the probe 676-678 us against 712-716 at the 1.1B shape).
  // The forward's lighter epilogue ran slower shared (1,174-1,178 us against 1,148-1,164).
  static constexpr int store_warps = backward ? 3 : 1, store_consumers = backward ? 2 : 1;
  static constexpr int a_bytes = block_m * block_k * 2, b_bytes = block_n * block_k * 2;
  static constexpr int extra_bytes = backward ? 2 * 2 * 2 * chunk_bytes : 2 * chunk_bytes;
  static constexpr int barriers = 2 * stages + 4 + (backward ? 4 : 0);
  static constexpr int smem_bytes =
      stages * (a_bytes + b_bytes) + 2 * staged_bytes + extra_bytes + 1024 + 8 * barriers;
  static_assert(smem_bytes <= 232448, "an H100's or H200's shared memory a block");
};

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(std::uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_expect(std::uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(std::uint32_t bar, int parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar,
                                         int inner, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4}], "
      "[%2];" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(inner), "r"(row)
      : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src, int inner, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(src), "r"(inner), "r"(row)
               : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Every store this thread committed has read its shared memory.
__device__ __forceinline__ void stores_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void stores_done() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void async_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A K-major operand of rows of 64 bf16 (128 bytes) in TMA's 128-byte swizzle: 8-row atoms 1024
// bytes apart.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// A K-major operand of rows of 32 bf16 (64 bytes) in the 64-byte swizzle: 8-row atoms 512 bytes
// apart.
__device__ __forceinline__ std::uint64_t sw64_desc(std::uint32_t addr) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (32ull << 32) | (2ull << 62);
}
// An N-major operand of 32 k-rows: 64-column boxes of k-rows of 128 bytes, boxes 4 KiB apart (the
// leading offset), 8-row atoms 1024 bytes apart (the stride offset), in the 128-byte swizzle.
__device__ __forceinline__ std::uint64_t mn_major_desc(std::uint32_t addr) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (256ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// d (+)= a b over k = 16: a 64 x 16 K-major, b 16 x 256, K-major (trans_b 0) or N-major (1).
template <int trans_b>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b,
                                                 int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
      "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, "
      "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, "
      "%71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "
      "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "
      "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, "
      "%126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),
        "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),
        "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),
        "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
        "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
        "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(trans_b));
}

__device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
// h of two packed bf16 gates and ups, as fused_kernels' swiglu_forward computes it.
__device__ __forceinline__ std::uint32_t swiglu_pack(std::uint32_t g2, std::uint32_t u2) {
  const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g2));
  const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u2));
  return pack(g.x * swiglu_sigmoid(g.x) * u.x, g.y * swiglu_sigmoid(g.y) * u.y);
}

struct tile_at {
  int m, n;
};
__device__ __forceinline__ tile_at tile_coords(int tile, int tiles_m, int tiles_n) {
  const int per_group = group_m * tiles_n;
  const int group = tile / per_group, first_m = group * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int in_group = tile % per_group;
  return {first_m + in_group % rows, in_group / rows};
}

// Addresses in shared memory, for stages as many as `stages`.
struct smem_layout {
  std::uint32_t a, b, staged, extra, bars;
  int stages;
  __device__ std::uint32_t full(int s) const { return bars + 8 * s; }
  __device__ std::uint32_t empty(int s) const { return bars + 8 * (stages + s); }
  __device__ std::uint32_t staged_bar(int c) const { return bars + 8 * (2 * stages + c); }
  __device__ std::uint32_t free_bar(int c) const { return bars + 8 * (2 * stages + 2 + c); }
  // SwiGLU's backward: buffer b of consumer c (gate's piece, then up's) and its barrier.
  __device__ std::uint32_t gate_up_buffer(int c, int b) const {
    return extra + (2 * c + b) * 2 * chunk_bytes;
  }
  __device__ std::uint32_t gate_up_bar(int c, int b) const { return bars + 8 * (2 * stages + 4 + 2 * c + b); }
};

struct gemm_args {
  int m, out_cols, k;
  int inner;  // SwiGLU's inner size
  // rotary: the product's first q_cols columns are q, the next rot_cols - q_cols k, the rest v;
  // cos and sin (seq_len, head_dim) fp32, row r of the product at position r % seq_len.
  int q_cols = 0, rot_cols = 0, head_dim = 0, seq_len = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// The loads: one thread, every tile's k-steps into the stages as they come free. The weights'
// tile is 256 rows of one weight (plain), 128 rows of gate and the same 128 of up (swiglu), or,
// N-major (swiglu_backward: b is (k, n) row-major), four 64-column boxes side by side in n.
template <epilogue E>
__device__ void load_tiles(const smem_layout& s, const CUtensorMap* map_a, const CUtensorMap* map_b0,
                           const CUtensorMap* map_b1, int tiles_m, int tiles_n, int k_tiles) {
  using g = geometry<E>;
  int stage = 0, phase = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const tile_at at = tile_coords(tile, tiles_m, tiles_n);
    for (int kt = 0; kt < k_tiles; ++kt) {
      bar_wait(s.empty(stage), phase ^ 1);
      bar_expect(s.full(stage), g::a_bytes + g::b_bytes);
      const std::uint32_t sa = s.a + stage * g::a_bytes, sb = s.b + stage * g::b_bytes;
      tma_load(sa, map_a, s.full(stage), kt * g::block_k, at.m * block_m);
      if constexpr (g::backward) {
        for (int q = 0; q < 4; ++q)
          tma_load(sb + q * (g::block_k * 64 * 2), map_b0, s.full(stage), at.n * block_n + 64 * q,
                   kt * g::block_k);
      } else {
        const int row_b0 = E == epilogue::swiglu ? at.n * (block_n / 2) : at.n * block_n;
        const int row_b1 = E == epilogue::swiglu ? row_b0 : row_b0 + block_n / 2;
        tma_load(sb, map_b0, s.full(stage), kt * g::block_k, row_b0);
        tma_load(sb + g::b_bytes / 2, map_b1, s.full(stage), kt * g::block_k, row_b1);
      }
      if (++stage == g::stages) stage = 0, phase ^= 1;
    }
  }
}

__device__ __forceinline__ uint4 load_shared(std::uint32_t at) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(at));
  return v;
}
__device__ __forceinline__ void store_shared(std::uint32_t at, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ float2 unpack(std::uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

// Where a consumer's staged result holds the 8 columns from `col` (a multiple of 8) of `row`: piece
// col / 64, the row's 128 bytes, the 16-byte unit in TMA's 128-byte swizzle (multiply_tiles writes
// it there, rotate_staged turns it there).
__device__ __forceinline__ std::uint32_t staged_at(std::uint32_t region, int row, int col) {
  return region + (col / 64) * chunk_bytes + row * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16);
}

// Rotary's forward on two packed pairs of bf16 (element e of lo with element e of hi), entries e
// and e + 1 of the tables, as fused_kernels' rotary_half computes it.
__device__ __forceinline__ void rotary_pack(std::uint32_t& lo2, std::uint32_t& hi2, const float (&c_lo)[8],
                                            const float (&c_hi)[8], const float (&s_lo)[8],
                                            const float (&s_hi)[8], int e) {
  const float2 lo = unpack(lo2), hi = unpack(hi2);
  float a0, b0, a1, b1;
  rotary_forward_pair(lo.x, hi.x, c_lo[e], c_hi[e], s_lo[e], s_hi[e], a0, b0);
  rotary_forward_pair(lo.y, hi.y, c_lo[e + 1], c_hi[e + 1], s_lo[e + 1], s_hi[e + 1], a1, b1);
  lo2 = pack(a0, a1);
  hi2 = pack(b0, b1);
}

// SwiGLU's backward of two packed gradients, gates and ups, as fused_kernels' swiglu_backward:
// d gate = dh u s (1 + g (1 - s)), d up = dh g s, s = sigmoid(g).
__device__ __forceinline__ void swiglu_grad_pack(std::uint32_t dh2, std::uint32_t g2, std::uint32_t u2,
                                                 std::uint32_t& dg2, std::uint32_t& du2) {
  const float2 dh = unpack(dh2), g = unpack(g2), u = unpack(u2);
  const float s0 = swiglu_sigmoid(g.x), s1 = swiglu_sigmoid(g.y);
  dg2 = pack(dh.x * u.x * s0 * (1.0f + g.x * (1.0f - s0)), dh.y * u.y * s1 * (1.0f + g.y * (1.0f - s1)));
  du2 = pack(dh.x * g.x * s0, dh.y * g.y * s1);
}

constexpr int piece_units = chunk_bytes / 16;  // 16-byte units of a piece

// The store warps of consumers `first` to first + consumers - 1: the epilogue's work on their
// staged results, a tile at a time, shared out by 16-byte units over the warps, and the stores by
// TMA (issued, and waited for, by the first thread: bulk groups are a thread's own).
template <epilogue E>
struct store_group {
  static constexpr int warps = geometry<E>::store_warps, consumers = geometry<E>::store_consumers;
  const smem_layout& s;
  int first, index;  // the first consumer, and this thread's place in the group
  const gemm_args& args;
  const CUtensorMap* map_out;  // rotary: q
  const CUtensorMap* map_h;    // swiglu: h; swiglu_backward: the forward's gate | up; rotary: k
  const CUtensorMap* map_v;    // rotary: v
  int gate_up_phases = 0;      // swiglu_backward: a bit for each buffer

  __device__ bool leader() const { return index == 0; }
  __device__ std::uint32_t region(int c) const { return s.staged + c * staged_bytes; }
  // Every thread of the group is here (named barrier 1 + first).
  __device__ void sync() const {
    if constexpr (warps == 1)
      __syncwarp();
    else
      asm volatile("bar.sync %0, %1;" ::"r"(1 + first), "n"(32 * warps) : "memory");
  }
  // The group's writes to shared memory are seen by TMA; then the leader may store them.
  __device__ void publish() const {
    async_proxy_fence();
    sync();
  }

  // rotary: the output that the product's column `col` lies in (q, k or v), col made its column there.
  __device__ const CUtensorMap* part_map(int& col) const {
    if (col < args.q_cols) return map_out;
    col -= args.q_cols;
    if (col < args.rot_cols - args.q_cols) return map_h;
    col -= args.rot_cols - args.q_cols;
    return map_v;
  }

  // The staged pieces as they are: plain, the product's 256 columns; swiglu, gate's 128 and up's;
  // rotary, each 64 columns into q, k or v.
  __device__ void store_staged(const tile_at& at) const {
    if (!leader()) return;
    for (int c = first; c < first + consumers; ++c) {
      for (int q = 0; q < 4; ++q) {
        int col = E == epilogue::swiglu ? (q / 2) * args.inner + at.n * (block_n / 2) + 64 * (q % 2)
                                        : at.n * block_n + 64 * q;
        const CUtensorMap* map = E == epilogue::rotary ? part_map(col) : map_out;
        tma_store(map, region(c) + q * chunk_bytes, col, at.m * block_m + c * 64);
      }
    }
    store_commit();
  }

  // rotary: q's and k's heads of the staged product turned in place. A thread takes 8 dimensions
  // of the heads' first halves (j to j + 7, and their partners half further) in a row, reads that
  // row's position's cos/sin for them once and turns them in every head of the tile that turns.
  // The caller publishes.
  __device__ void rotate_staged(const tile_at& at) const {
    const int first_col = at.n * block_n;
    if (first_col >= args.rot_cols) return;  // v
    const int d = args.head_dim, half = d / 2, per_head = half / 8;
    const int heads = min(block_n, args.rot_cols - first_col) / d;  // a tile may end in k and go on in v
#pragma unroll 2
    for (int item = index; item < consumers * 64 * per_head; item += 32 * warps) {
      const int c = first + item / (64 * per_head), row = item % (64 * per_head) / per_head;
      const int j = item % per_head * 8;
      const std::int64_t position = (at.m * block_m + c * 64 + row) % args.seq_len;
      const float* cos_at = args.cos + position * d + j;
      const float* sin_at = args.sin + position * d + j;
      float c_lo[8], c_hi[8], s_lo[8], s_hi[8];
      load_table<8>(cos_at, c_lo);
      load_table<8>(cos_at + half, c_hi);
      load_table<8>(sin_at, s_lo);
      load_table<8>(sin_at + half, s_hi);
      for (int h = 0; h < heads; ++h) {
        const std::uint32_t at_lo = staged_at(region(c), row, h * d + j),
                            at_hi = staged_at(region(c), row, h * d + j + half);
        uint4 x = load_shared(at_lo), y = load_shared(at_hi);
        rotary_pack(x.x, y.x, c_lo, c_hi, s_lo, s_hi, 0);
        rotary_pack(x.y, y.y, c_lo, c_hi, s_lo, s_hi, 2);
        rotary_pack(x.z, y.z, c_lo, c_hi, s_lo, s_hi, 4);
        rotary_pack(x.w, y.w, c_lo, c_hi, s_lo, s_hi, 6);
        store_shared(at_lo, x);
        store_shared(at_hi, y);
      }
    }
  }

  // swiglu: h from the staged g and u (the same swizzled place in each piece), a piece at a time
  // through each consumer's extra buffer.
  __device__ void store_h(const tile_at& at) const {
    for (int q = 0; q < 2; ++q) {
      if (q == 1) {  // the first piece of h has left the buffers
        if (leader()) stores_read();
        sync();
      }
#pragma unroll 4
      for (int v = index; v < consumers * piece_units; v += 32 * warps) {
        const int c = first + v / piece_units, u = v % piece_units;
        const uint4 gv = load_shared(region(c) + q * chunk_bytes + u * 16);
        const uint4 uv = load_shared(region(c) + (2 + q) * chunk_bytes + u * 16);
        store_shared(s.extra + c * chunk_bytes + u * 16,
                     uint4{swiglu_pack(gv.x, uv.x), swiglu_pack(gv.y, uv.y), swiglu_pack(gv.z, uv.z),
                           swiglu_pack(gv.w, uv.w)});
      }
      publish();
      if (leader()) {
        for (int c = first; c < first + consumers; ++c)
          tma_store(map_h, s.extra + c * chunk_bytes, at.n * (block_n / 2) + 64 * q, at.m * block_m + c * 64);
        store_commit();
      }
    }
  }

  // swiglu_backward, the leader: gate's and up's piece q of the tile into each consumer's buffer
  // q % 2.
  __device__ void load_gate_up(const tile_at& at, int q) const {
    for (int c = first; c < first + consumers; ++c) {
      const std::uint32_t buffer = s.gate_up_buffer(c, q % 2), bar = s.gate_up_bar(c, q % 2);
      const int row = at.m * block_m + c * 64;
      bar_expect(bar, 2 * chunk_bytes);
      tma_load(buffer, map_h, bar, at.n * block_n + 64 * q, row);
      tma_load(buffer + chunk_bytes, map_h, bar, args.inner + at.n * block_n + 64 * q, row);
    }
  }

  // swiglu_backward: each staged piece of dh becomes d gate in its place and d up in up's; pieces
  // 2 and 3 of gate and up come in as 0's and 1's d up leave.
  __device__ void store_swiglu_grads(const tile_at& at) {
    for (int q = 0; q < 4; ++q) {
      const int b = q % 2;
      for (int c = first; c < first + consumers; ++c)
        bar_wait(s.gate_up_bar(c, b), (gate_up_phases >> b) & 1);
      gate_up_phases ^= 1 << b;
#pragma unroll 4
      for (int v = index; v < consumers * piece_units; v += 32 * warps) {
        const int c = first + v / piece_units, u = v % piece_units;
        const std::uint32_t piece = region(c) + q * chunk_bytes + u * 16;
        const std::uint32_t g_at = s.gate_up_buffer(c, b) + u * 16, u_at = g_at + chunk_bytes;
        const uint4 dh = load_shared(piece), gv = load_shared(g_at), uv = load_shared(u_at);
        uint4 dg, du;
        swiglu_grad_pack(dh.x, gv.x, uv.x, dg.x, du.x);
        swiglu_grad_pack(dh.y, gv.y, uv.y, dg.y, du.y);
        swiglu_grad_pack(dh.z, gv.z, uv.z, dg.z, du.z);
        swiglu_grad_pack(dh.w, gv.w, uv.w, dg.w, du.w);
        store_shared(piece, dg);
        store_shared(u_at, du);
      }
      publish();
      if (leader()) {
        const int col0 = at.n * block_n + 64 * q;
        for (int c = first; c < first + consumers; ++c) {
          const int row = at.m * block_m + c * 64;
          tma_store(map_out, region(c) + q * chunk_bytes, col0, row);
          tma_store(map_out, s.gate_up_buffer(c, b) + chunk_bytes, args.inner + col0, row);
        }
        store_commit();
        if (q < 2) {  // the buffers' d up have left them: piece q + 2 comes in
          stores_read();
          load_gate_up(at, q + 2);
        }
      }
    }
  }
};

// The stores, tile by tile, by a group of store warps: with swiglu_backward gate's and up's first
// two pieces are on their way in while the tile is multiplied; once the consumers have staged
// their results, the epilogue's work and stores; once the stores have read them, the staging
// regions are the consumers' again.
template <epilogue E>
__device__ void store_tiles(const smem_layout& s, int first, int index, const CUtensorMap* map_out,
                            const CUtensorMap* map_h, const CUtensorMap* map_v, int tiles_m, int tiles_n,
                            const gemm_args& args) {
  store_group<E> w{s, first, index, args, map_out, map_h, map_v};
  constexpr int consumers = geometry<E>::store_consumers;
  int phase = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const tile_at at = tile_coords(tile, tiles_m, tiles_n);
    if (E == epilogue::swiglu_backward && w.leader()) {
      w.load_gate_up(at, 0);
      w.load_gate_up(at, 1);
    }
    for (int c = first; c < first + consumers; ++c) bar_wait(s.staged_bar(c), phase);
    if constexpr (E == epilogue::swiglu_backward) {
      w.store_swiglu_grads(at);
    } else {
      if constexpr (E == epilogue::rotary) {
        w.rotate_staged(at);
        w.publish();
      }
      w.store_staged(at);
      if constexpr (E == epilogue::swiglu) w.store_h(at);
    }
    if (w.leader()) {  // every piece has left the staging regions
      stores_read();
      for (int c = first; c < first + consumers; ++c) bar_arrive(s.free_bar(c));
    }
    w.sync();
    phase ^= 1;
  }
  if (w.leader()) stores_done();
}

// Consumer c: 64 rows of each tile, then its result staged for the store warps. Fragment j of the
// accumulators holds columns 8j..8j+7 of rows r and r + 8 (i = 0, 1); piece q holds fragments
// 8q..8q+7 in TMA's 128-byte swizzle, which this layout writes without bank conflicts. The
// operands in shared memory: x K-major in rows of 128 bytes (64-byte rows in 512-byte atoms for
// swiglu_backward's 32 k-steps); the weights K-major, or N-major for swiglu_backward: four
// 64-column boxes side by side (the descriptor's leading offset), k-rows of 128 bytes in 8-row
// atoms 1024 bytes apart.
template <epilogue E>
__device__ void multiply_tiles(const smem_layout& s, int c, int tiles_m, int tiles_n, int k_tiles) {
  using g = geometry<E>;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const std::uint32_t region = s.staged + c * staged_bytes;
  int stage = 0, phase = 0, out_phase = 0;
  float d[128];
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    int prev_stage = -1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      bar_wait(s.full(stage), phase);
      const std::uint32_t sa = s.a + stage * g::a_bytes + c * (64 * g::block_k * 2);
      const std::uint32_t sb = s.b + stage * g::b_bytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < g::block_k / 16; ++kk) {
        if constexpr (g::backward)
          wgmma_m64n256k16<1>(d, sw64_desc(sa + kk * 32), mn_major_desc(sb + kk * 16 * 128),
                              kt > 0 || kk > 0);
        else
          wgmma_m64n256k16<0>(d, smem_desc(sa + kk * 32), smem_desc(sb + kk * 32), kt > 0 || kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the stage before this one is read: hand it back
      if (prev_stage >= 0 && t == 0) bar_arrive(s.empty(prev_stage));
      prev_stage = stage;
      if (++stage == g::stages) stage = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    if (t == 0) bar_arrive(s.empty(prev_stage));
    bar_wait(s.free_bar(c), out_phase ^ 1);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = warp * 16 + lane / 4 + 8 * i;
          const std::uint32_t at = staged_at(region, r, 64 * q + 8 * j) + (lane % 4) * 4;
          const std::uint32_t v = pack(d[4 * (8 * q + j) + 2 * i], d[4 * (8 * q + j) + 2 * i + 1]);
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(v) : "memory");
        }
      }
    }
    async_proxy_fence();
    bar_arrive(s.staged_bar(c));
    out_phase ^= 1;
  }
}

// out = a b^T, or a b with swiglu_backward (b N-major); with swiglu, b0 holds gate's rows and
// b1 up's, a tile takes 128 of each, and out is (m, 2 inner) with h (m, inner) beside it.
template <epilogue E>
__global__ void __launch_bounds__(threads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b0,
                const __grid_constant__ CUtensorMap map_b1, const __grid_constant__ CUtensorMap map_out,
                const __grid_constant__ CUtensorMap map_h, const __grid_constant__ CUtensorMap map_v,
                const gemm_args args) {
  using g = geometry<E>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  smem_layout s;
  s.stages = g::stages;
  s.a = base;
  s.b = s.a + g::stages * g::a_bytes;
  s.staged = s.b + g::stages * g::b_bytes;
  s.extra = s.staged + 2 * staged_bytes;
  s.bars = s.extra + g::extra_bytes;
  const int tiles_m = args.m / block_m, tiles_n = args.out_cols / block_n, k_tiles = args.k / g::block_k;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < g::stages; ++i) {
      bar_init(s.full(i), 1);
      bar_init(s.empty(i), 2);
    }
    for (int c = 0; c < 2; ++c) {
      bar_init(s.staged_bar(c), 128);
      bar_init(s.free_bar(c), 1);
      if (g::backward) bar_init(s.gate_up_bar(c, 0), 1), bar_init(s.gate_up_bar(c, 1), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 136;");
    if (threadIdx.x == 0) load_tiles<E>(s, &map_a, &map_b0, &map_b1, tiles_m, tiles_n, k_tiles);
    if (warp >= 1 && warp <= 2 * g::store_warps / g::store_consumers) {  // the store warps
      const int first = g::store_consumers == 2 ? 0 : warp - 1;
      const int index = g::store_consumers == 2 ? threadIdx.x - 32 : threadIdx.x % 32;
      store_tiles<E>(s, first, index, &map_out, &map_h, &map_v, tiles_m, tiles_n, args);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 184;");
  multiply_tiles<E>(s, wg - 1, tiles_m, tiles_n, k_tiles);
}

using encode_fn = decltype(&cuTensorMapEncodeTiled);

// The driver's tensor-map encoder, fetched once (no link to libcuda).
encode_fn encoder() {
  static encode_fn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<encode_fn>(p);
  }();
  return fn;
}

// A row-major bf16 (rows, cols) tensor, rows `stride` elements apart, in boxes of box_rows x
// box_cols in the swizzle of their rows' bytes (box_cols * 2: 128 or 64).
bool tensor_map(CUtensorMap* map, const void* base, std::int64_t rows, std::int64_t cols, std::int64_t stride,
                int box_rows, int box_cols) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const auto swizzle = box_cols * 2 == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  return encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                   elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Multiprocessors of the current device, and the kernels' shared memory allowed on it, once.
int prepare_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  static std::mutex mutex;
  static int sms[64] = {};
  const std::lock_guard<std::mutex> lock(mutex);
  if (device >= 64) return 0;
  if (sms[device] == 0) {
    int count = 0;
    const auto allow = [](auto kernel, int bytes) {
      return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess;
    };
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        !allow(gemm_kernel<epilogue::plain>, geometry<epilogue::plain>::smem_bytes) ||
        !allow(gemm_kernel<epilogue::swiglu>, geometry<epilogue::swiglu>::smem_bytes) ||
        !allow(gemm_kernel<epilogue::swiglu_backward>, geometry<epilogue::swiglu_backward>::smem_bytes) ||
        !allow(gemm_kernel<epilogue::rotary>, geometry<epilogue::rotary>::smem_bytes))
      return 0;
    sms[device] = count;
  }
  return sms[device];
}

// The operands of one launch: a (m, k) and, as tensor maps, the weights (b0, b1: their rows of k,
// `b_rows` of them, `b_stride` apart; N-major: k rows of `b_cols`), out (m, out_cols; rotary: q),
// h (swiglu; rotary: k), the forward's gate | up (swiglu_backward) and v (rotary).
struct launch_plan {
  const void* a;
  const void* b0;
  const void* b1;
  std::int64_t b_stride;
  void* out;
  void* h;
  std::int64_t m, out_cols, k;
  const void* gate_up = nullptr;
  void* v = nullptr;
};

// The outputs' tensor maps: out (plain: the product; swiglu: gate | up; swiglu_backward: d gate |
// d up; rotary: q), h (swiglu: h; swiglu_backward: the forward's gate | up, read; rotary: k) and
// v (rotary: v; the others, out's map again, unused).
template <epilogue E>
bool output_maps(const launch_plan& p, const gemm_args& args, CUtensorMap& out, CUtensorMap& h,
                 CUtensorMap& v) {
  if constexpr (E == epilogue::rotary) {
    const std::int64_t q_cols = args.q_cols, k_cols = args.rot_cols - args.q_cols,
                       v_cols = p.out_cols - args.rot_cols;
    return tensor_map(&out, p.out, p.m, q_cols, q_cols, 64, 64) &&
           tensor_map(&h, p.h, p.m, k_cols, k_cols, 64, 64) &&
           tensor_map(&v, p.v, p.m, v_cols, v_cols, 64, 64);
  }
  const std::int64_t inner = args.inner, written = E == epilogue::swiglu_backward ? 2 * inner : p.out_cols;
  bool ok = tensor_map(&out, p.out, p.m, written, written, 64, 64);
  if constexpr (E == epilogue::swiglu_backward)
    ok = ok && tensor_map(&h, p.gate_up, p.m, 2 * inner, 2 * inner, 64, 64);
  else if constexpr (E == epilogue::swiglu)
    ok = ok && tensor_map(&h, p.h, p.m, inner, inner, 64, 64);
  else
    h = out;
  v = out;
  return ok;
}

template <epilogue E>
int launch(const launch_plan& p, const gemm_args& args, void* stream) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !hopper_gemm_available(device)) return cudaErrorNotSupported;
  if (!hopper_gemm_fits(p.m, p.out_cols, p.k) || !aligned16(p.a) || !aligned16(p.b0) || !aligned16(p.b1) ||
      !aligned16(p.out) || ((E == epilogue::swiglu || E == epilogue::rotary) && !aligned16(p.h)) ||
      (E == epilogue::swiglu_backward && !aligned16(p.gate_up)) ||
      (E == epilogue::rotary && !aligned16(p.v)) || p.b_stride % 8 != 0 ||
      p.b_stride < (E == epilogue::swiglu_backward ? p.out_cols : p.k))
    return cudaErrorInvalidValue;
  const int sms = prepare_device();
  if (sms == 0) return cudaErrorNotSupported;
  CUtensorMap map_a, map_b0, map_b1, map_out, map_h, map_v;
  using g = geometry<E>;
  bool ok = tensor_map(&map_a, p.a, p.m, p.k, p.k, block_m, g::block_k) &&
            output_maps<E>(p, args, map_out, map_h, map_v);
  if (E == epilogue::swiglu_backward) {  // b (k, n) row-major: boxes of a stage's k-rows by 64 columns
    ok = ok && tensor_map(&map_b0, p.b0, p.k, p.out_cols, p.b_stride, g::block_k, 64);
    map_b1 = map_b0;
  } else {
    const std::int64_t b_rows = E == epilogue::swiglu ? args.inner : p.out_cols;
    ok = ok && tensor_map(&map_b0, p.b0, b_rows, p.k, p.b_stride, block_n / 2, g::block_k) &&
         tensor_map(&map_b1, p.b1, b_rows, p.k, p.b_stride, block_n / 2, g::block_k);
  }
  if (!ok) return cudaErrorInvalidValue;
  const std::int64_t tiles = p.m / block_m * (p.out_cols / block_n);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  gemm_kernel<E><<<grid, threads, g::smem_bytes, static_cast<cudaStream_t>(stream)>>>(
      map_a, map_b0, map_b1, map_out, map_h, map_v, args);
  return static_cast<int>(cudaGetLastError());
}

gemm_args args_of(std::int64_t m, std::int64_t out_cols, std::int64_t k, std::int64_t inner) {
  return {static_cast<int>(m), static_cast<int>(out_cols), static_cast<int>(k), static_cast<int>(inner)};
}

}  // namespace

// Asked once a device: the fits checks and every launch ask it, a few times a layer each step.
bool hopper_gemm_available(int device) {
  static std::array<std::atomic<int>, 64> known{};  // 0 not asked yet, 1 yes, -1 no
  if (device < 0 || device >= static_cast<int>(known.size())) return false;
  int answer = known[device].load(std::memory_order_relaxed);
  if (answer == 0) {
    int major = 0, minor = 0;
    const bool yes =
        encoder() != nullptr &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
        major == 9 && minor == 0;
    answer = yes ? 1 : -1;
    known[device].store(answer, std::memory_order_relaxed);
  }
  return answer > 0;
}

bool hopper_gemm_fits(std::int64_t rows, std::int64_t cols, std::int64_t k) {
  constexpr std::int64_t limit = std::int64_t{1} << 31;
  return rows > 0 && cols > 0 && k > 0 && rows % block_m == 0 && cols % block_n == 0 && k % 64 == 0 &&
         rows < limit && cols < limit && k < limit;
}

int hopper_linear(const void* x, const void* weight, std::int64_t weight_stride, void* out, std::int64_t rows,
                  std::int64_t cols, std::int64_t k, void* stream) {
  return launch<epilogue::plain>({x, weight, weight, weight_stride, out, nullptr, rows, cols, k},
                                 args_of(rows, cols, k, 0), stream);
}

int hopper_linear_swiglu(const void* x, const void* gate, const void* up, std::int64_t weight_stride,
                         void* gate_up, void* h, std::int64_t rows, std::int64_t inner, std::int64_t k,
                         void* stream) {
  return launch<epilogue::swiglu>({x, gate, up, weight_stride, gate_up, h, rows, 2 * inner, k},
                                  args_of(rows, 2 * inner, k, inner), stream);
}

int hopper_swiglu_input_grad(const void* grad_y, const void* down, std::int64_t down_stride,
                             const void* gate_up, void* grad_gate_up, std::int64_t rows, std::int64_t inner,
                             std::int64_t hidden, void* stream) {
  if (grad_gate_up == gate_up) return cudaErrorInvalidValue;
  return launch<epilogue::swiglu_backward>(
      {grad_y, down, down, down_stride, grad_gate_up, nullptr, rows, inner, hidden, gate_up},
      args_of(rows, inner, hidden, inner), stream);
}

bool hopper_rotary_fits(std::int64_t rows, const qkv_columns& cols, std::int64_t k, std::int64_t head_dim) {
  const std::int64_t d = head_dim;
  return d >= 16 && d % 16 == 0 && block_n % d == 0 && cols.q > 0 && cols.k > 0 && cols.v > 0 &&
         cols.q % d == 0 && cols.k % d == 0 && cols.q % 64 == 0 && cols.k % 64 == 0 && cols.v % 64 == 0 &&
         hopper_gemm_fits(rows, cols.q + cols.k + cols.v, k);
}

int hopper_linear_rotary(const void* x, const void* weight, std::int64_t weight_stride,
                         const qkv_outputs& out, const rotary_tables& tables, std::int64_t rows,
                         std::int64_t k, void* stream) {
  const qkv_columns& cols = out.cols;
  if (!hopper_rotary_fits(rows, cols, k, tables.head_dim) || tables.seq_len <= 0 ||
      tables.seq_len >= (std::int64_t{1} << 31) || !aligned16(tables.cos) || !aligned16(tables.sin))
    return cudaErrorInvalidValue;
  const std::int64_t all = cols.q + cols.k + cols.v;
  gemm_args args = args_of(rows, all, k, 0);
  args.q_cols = static_cast<int>(cols.q);
  args.rot_cols = static_cast<int>(cols.q + cols.k);
  args.head_dim = static_cast<int>(tables.head_dim);
  args.seq_len = static_cast<int>(tables.seq_len);
  args.cos = tables.cos;
  args.sin = tables.sin;
  launch_plan plan{x, weight, weight, weight_stride, out.q, out.k, rows, all, k};
  plan.v = out.v;
  return launch<epilogue::rotary>(plan, args, stream);
}

}  // namespace cohort::core::model::kernels
