// What one cuBLASLt product puts into a CUDA graph, candidate by candidate: each GEMM of GPT-2
// 124M (16 x 1024 tokens, biases in the forward's epilogue) and of the 1.1B shape (8 x 2048) is
// captured alone into a graph for each of cuBLASLt's first 8 candidates (32 MiB of workspace),
// and the graph's nodes are counted by kind, with each memset's target (the output, the
// workspace, or elsewhere) and size. Each candidate is then timed inside a graph of 20 of its
// products, as a captured training step runs them (5 replays warm, 10 timed), operands of
// pseudo-random bf16. Prints the candidate's configuration (tile, stages, split-K, reduction
// scheme, cluster shape) beside it. Arguments: how many candidates to ask for (8), and the
// workspace to offer in bytes (32 MiB).
//   nvcc -std=c++17 -O2 -arch=sm_90 -o gemm_graph_nodes gemm_graph_nodes.cu -lcublasLt
//   ./gemm_graph_nodes [CANDIDATES [WORKSPACE_BYTES]]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "gemm_probe.cuh"
struct G {
  const char* name;
  cublasOperation_t ta, tb;
  int m, n, k;
  bool f32out, bias, accumulate;
};
template <typename T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t which) {
  T v{};
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, which, &v, sizeof(v), &got);
  return v;
}
int main(int argc, char** argv) {
  const int asked = argc > 1 ? std::atoi(argv[1]) : 8;
  size_t offered = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t(32) << 20;
  // Column-major cuBLAS terms (row-major y = x W^T is C^T = op(W) op(x)):
  // forward: TN m=out n=M k=in; dgrad: NN m=in n=M k=out; wgrad: NT m=in n=out k=M
  const int g2 = 16384, ll = 16384;
  std::vector<G> gs = {
      {"gpt2 qkv fwd+bias", CUBLAS_OP_T, CUBLAS_OP_N, 2304, g2, 768, false, true, false},
      {"gpt2 proj fwd+bias", CUBLAS_OP_T, CUBLAS_OP_N, 768, g2, 768, false, true, false},
      {"gpt2 fc fwd+bias", CUBLAS_OP_T, CUBLAS_OP_N, 3072, g2, 768, false, true, false},
      {"gpt2 fc2 fwd+bias", CUBLAS_OP_T, CUBLAS_OP_N, 768, g2, 3072, false, true, false},
      {"gpt2 qkv dgrad", CUBLAS_OP_N, CUBLAS_OP_N, 768, g2, 2304, false, false, false},
      {"gpt2 fc2 dgrad", CUBLAS_OP_N, CUBLAS_OP_N, 3072, g2, 768, false, false, false},
      {"gpt2 qkv wgrad", CUBLAS_OP_N, CUBLAS_OP_T, 768, 2304, g2, false, false, false},
      {"gpt2 fc2 wgrad", CUBLAS_OP_N, CUBLAS_OP_T, 3072, 768, g2, false, false, false},
      {"gpt2 lmhead fwd chunk", CUBLAS_OP_T, CUBLAS_OP_N, 50304, 2048, 768, false, false, false},
      {"gpt2 lmhead wgrad f32+=", CUBLAS_OP_N, CUBLAS_OP_T, 768, 50304, 2048, true, false, true},
      {"1.1b qkv fwd", CUBLAS_OP_T, CUBLAS_OP_N, 2560, ll, 2048, false, false, false},
      {"1.1b gateup fwd", CUBLAS_OP_T, CUBLAS_OP_N, 11264, ll, 2048, false, false, false},
      {"1.1b down dgrad", CUBLAS_OP_N, CUBLAS_OP_N, 5632, ll, 2048, false, false, false},
      {"1.1b o wgrad", CUBLAS_OP_N, CUBLAS_OP_T, 2048, 2048, ll, false, false, false},
  };
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  size_t ws = 32 << 20;
  void* wsp;
  CK(cudaMalloc(&wsp, ws));
  size_t big = (size_t)16384 * 11264 * 4;
  void *A, *B, *C, *bias;
  CK(cudaMalloc(&A, big));
  CK(cudaMalloc(&B, big));
  CK(cudaMalloc(&C, big));
  CK(cudaMalloc(&bias, 65536 * 2));
  fill_random<<<1024, 256>>>((__nv_bfloat16*)A, big / 2, 1);
  fill_random<<<1024, 256>>>((__nv_bfloat16*)B, big / 2, 2);
  fill_random<<<64, 256>>>((__nv_bfloat16*)bias, 65536, 3);
  CK(cudaDeviceSynchronize());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const float alpha = 1;
  for (auto& g : gs) {
    const float beta = g.accumulate ? 1.0f : 0.0f;
    int lda = g.ta == CUBLAS_OP_N ? g.m : g.k, ldb = g.tb == CUBLAS_OP_N ? g.k : g.n, ldc = g.m;
    cublasLtMatmulDesc_t d;
    CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof(g.ta)));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof(g.tb)));
    if (g.bias) {
      const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.ta == CUBLAS_OP_N ? g.m : g.k,
                                  g.ta == CUBLAS_OP_N ? g.k : g.m, lda));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g.tb == CUBLAS_OP_N ? g.k : g.n,
                                  g.tb == CUBLAS_OP_N ? g.n : g.k, ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, g.f32out ? CUDA_R_32F : CUDA_R_16BF, g.m, g.n, ldc));
    cublasLtMatmulPreference_t p;
    CK(cublasLtMatmulPreferenceCreate(&p));
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &offered,
                                            sizeof(offered)));
    std::vector<cublasLtMatmulHeuristicResult_t> res(asked);
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, p, asked, res.data(), &got));
    printf("%s (m %d n %d k %d): %d candidates\n", g.name, g.m, g.n, g.k, got);
    for (int i = 0; i < got; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const auto& a = res[i].algo;
      auto mm = [&] {
        return cublasLtMatmul(lt, d, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &a,
                              offered > 0 ? wsp : nullptr, offered, s);
      };
      // one product alone in a graph: its nodes
      cudaGraph_t one;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const auto st = mm();
      CK(cudaStreamEndCapture(s, &one));
      if (st != CUBLAS_STATUS_SUCCESS) {
        printf("  #%d failed in capture: %d\n", i, (int)st);
        cudaGraphDestroy(one);
        continue;
      }
      size_t count = 0;
      CK(cudaGraphGetNodes(one, nullptr, &count));
      std::vector<cudaGraphNode_t> nodes(count);
      CK(cudaGraphGetNodes(one, nodes.data(), &count));
      int kernels = 0, memsets = 0, other = 0;
      char where[256] = "";
      for (auto n : nodes) {
        cudaGraphNodeType t;
        CK(cudaGraphNodeGetType(n, &t));
        if (t == cudaGraphNodeTypeKernel) {
          ++kernels;
        } else if (t == cudaGraphNodeTypeMemset) {
          ++memsets;
          cudaMemsetParams mp{};
          CK(cudaGraphMemsetNodeGetParams(n, &mp));
          const char* target = mp.dst == C ? "out"
                               : ((char*)mp.dst >= (char*)wsp && (char*)mp.dst < (char*)wsp + ws)
                                   ? "workspace"
                                   : "elsewhere";
          const size_t bytes = mp.elementSize * mp.width * mp.height;
          snprintf(where + strlen(where), sizeof(where) - strlen(where), " memset %s %zu B;", target, bytes);
        } else {
          ++other;
        }
      }
      cudaGraphDestroy(one);
      // 20 products in a graph, timed as replays
      cudaGraph_t many;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int r = 0; r < 20; ++r) mm();
      CK(cudaStreamEndCapture(s, &many));
      CK(cudaGraphInstantiate(&exec, many, 0));
      for (int r = 0; r < 5; ++r) CK(cudaGraphLaunch(exec, s));
      CK(cudaEventRecord(e0, s));
      for (int r = 0; r < 10; ++r) CK(cudaGraphLaunch(exec, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(many);
      printf(
          "  #%d %7.1f us in a graph | nodes: %d kernel(s), %d memset(s), %d other;%s | algo %d tile %d "
          "stages %d "
          "splitK %d reduction %d cluster %d custom %d ws %zu\n",
          i, ms * 1e3 / 200, kernels, memsets, other, where, config<int>(a, CUBLASLT_ALGO_CONFIG_ID),
          config<int>(a, CUBLASLT_ALGO_CONFIG_TILE_ID), config<int>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
          config<int>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
          config<int>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
          config<int>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
          config<int>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), res[i].workspaceSize);
    }
    cublasLtMatmulPreferenceDestroy(p);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
  }
}
