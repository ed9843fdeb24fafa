"""Attention's backends in torch's SDPA at the benchmark jobs' shapes (the 1.1B: 8 x 2048, 32 query
heads over 4 key/value heads of 64; GPT-2 124M: 16 x 1024, 12 heads of 64; the 7B: 2 x 2048, 32 heads
of 128), bf16, causal, q/k/v laid out (B, T, H, D) as the decoder makes them: forward, and forward
and backward, ms a call for torch's default choice, cuDNN, FlashAttention and the memory-efficient
kernel, grouped heads read in place (enable_gqa) or repeated; then the default's kernels.
  python3 attention_backends.py
"""
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dev = "cuda"
shapes = [("1.1B", 8, 32, 4, 2048, 64), ("gpt2", 16, 12, 12, 1024, 64), ("7B", 2, 32, 32, 2048, 128)]
backs = [("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
         ("eff", SDPBackend.EFFICIENT_ATTENTION)]
def timeit(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
def main():
    torch.manual_seed(0)
    for name, B, H, KV, T, D in shapes:
        q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        k = torch.randn(B, T, KV, D, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        v = torch.randn(B, T, KV, D, device=dev, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        go = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)
        flops_f = 4 * B * H * T * T * D / 2  # causal
        for bname, b in backs:
            for gqa_mode in (["gqa", "repeat"] if KV != H else ["plain"]):
                def fwd():
                    kk, vv = k, v
                    if gqa_mode == "repeat":
                        kk = k.repeat_interleave(H // KV, 1); vv = v.repeat_interleave(H // KV, 1)
                    return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=(gqa_mode == "gqa"))
                def fb():
                    y = fwd(); y.backward(go)
                try:
                    import contextlib
                    with (sdpa_kernel([b]) if b is not None else contextlib.nullcontext()):
                        tf = timeit(lambda: fwd())
                        tfb = timeit(fb)
                    print(f"{name} {bname:5s} {gqa_mode:6s} fwd {tf:7.3f} ms ({flops_f/tf/1e9:5.0f} TF/s)  fwd+bwd {tfb:7.3f} ms ({3.5*flops_f/tfb/1e9:5.0f} TF/s)", flush=True)
                except Exception as ex:
                    print(f"{name} {bname} {gqa_mode}: {type(ex).__name__}: {str(ex)[:120]}", flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=(KV != H)); y.backward(go)
            torch.cuda.synchronize()
        print(name, "default kernels:", sorted({e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}))
    print("default backend check:")
    print(torch.__version__, torch.backends.cudnn.version())


if __name__ == "__main__":
    main()
