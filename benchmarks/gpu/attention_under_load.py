"""cuDNN's attention at the 1.1B shape: forward and backward with the output's gradient contiguous
(B, H, T, D) or a transposed (B, T, H, D) view, as the decoder's o projection hands it back; then
the attention kernels' times from torch's profiler when a gate/up-sized GEMM (16384 x 2048 x 11264)
runs between the calls.
  python3 attention_under_load.py
"""
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from attention_backends import timeit
torch.manual_seed(0)
B, H, KV, T, D = 8, 32, 4, 2048, 64
dev, bf = "cuda", torch.bfloat16
def mk(h): return torch.randn(B, T, h, D, device=dev, dtype=bf).transpose(1, 2).requires_grad_()
q, k, v = mk(H), mk(KV), mk(KV)
go_bhsd = torch.randn(B, H, T, D, device=dev, dtype=bf)
go_bshd = torch.randn(B, T, H, D, device=dev, dtype=bf).transpose(1, 2)
def fb(go):
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.autograd.backward(y, go, inputs=[q, k, v])
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for name, go in [("dO BHSD contiguous", go_bhsd), ("dO BSHD (transposed view)", go_bshd)]:
        print(name, "fwd+bwd %.3f ms" % timeit(lambda: fb(go)), flush=True)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        print("  out strides", y.stride())
    # under load: a gate/up-sized GEMM between attention calls, kernel times from the profiler
    a = torch.randn(16384, 2048, device=dev, dtype=bf); w = torch.randn(2048, 11264, device=dev, dtype=bf)
    def loaded():
        a @ w
        fb(go_bshd)
    for _ in range(30): loaded()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10): loaded()
        torch.cuda.synchronize()
    tot = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n = e.name[:60]; c, t = tot.get(n, (0, 0)); tot[n] = (c + 1, t + e.device_time)
    for n, (c, t) in sorted(tot.items(), key=lambda x: -x[1][1]): print("  loaded: %-60s %3d calls %8.1f us each" % (n, c, t / c))
