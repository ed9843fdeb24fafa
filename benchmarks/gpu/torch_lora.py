"""Plain-PyTorch LoRA throughput on one GPU: the baseline of cohort's LoRA jobs (same shapes, same
card, same call). No transformers, no peft: a Llama decoder whose base weights are frozen in bf16,
with LoRA adapters (A: r x in, Kaiming-uniform; B: out x r, zeros; scale alpha / r, fp32 parameters
used in bf16) on the projections named by --targets, trained with fused AdamW over the adapters.
  python3 torch_lora.py --config llama2-7b.json [--batch 2] [--seq 2048] [--r 16] [--alpha 32]
                        [--targets q,k,v,o,gate,up,down] [--steps 30] [--warmup 10] [--mode compile|eager]
                        [--profile N]
Prints one JSON line: tokens/s (median over the steps after the warmup), step seconds, peak memory;
with --profile N, then N more steps under torch.profiler (GPU only) and one JSON line per kernel
(the 30 longest in total: name, calls and milliseconds per step) before it."""
import argparse, json, math, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(s, fan_in, fan_out, r, alpha, adapt):
        super().__init__()
        s.weight = nn.Parameter(torch.empty(fan_out, fan_in, dtype=torch.bfloat16), requires_grad=False)
        nn.init.normal_(s.weight, std=0.02)
        s.adapt = adapt
        if adapt:
            s.a = nn.Parameter(torch.empty(r, fan_in)); nn.init.kaiming_uniform_(s.a, a=math.sqrt(5))
            s.b = nn.Parameter(torch.zeros(fan_out, r)); s.scale = alpha / r

    def forward(s, x):
        y = F.linear(x, s.weight)
        if s.adapt:
            y = y + F.linear(F.linear(x, s.a.to(x.dtype)), s.b.to(x.dtype)) * s.scale
        return y


class RMSNorm(nn.Module):
    def __init__(s, d, eps):
        super().__init__(); s.w = nn.Parameter(torch.ones(d, dtype=torch.bfloat16), requires_grad=False); s.eps = eps

    def forward(s, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + s.eps)).to(x.dtype) * s.w


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


class Block(nn.Module):
    def __init__(s, c, r, alpha, targets):
        super().__init__()
        d, ffn = c["hidden_size"], c["intermediate_size"]
        s.h = c["num_attention_heads"]; s.kvh = c.get("num_key_value_heads", s.h); s.hd = d // s.h
        L = lambda i, o, name: LoRALinear(i, o, r, alpha, name in targets)
        s.q, s.k, s.v = L(d, s.h * s.hd, "q"), L(d, s.kvh * s.hd, "k"), L(d, s.kvh * s.hd, "v")
        s.o = L(s.h * s.hd, d, "o")
        s.gate, s.up, s.down = L(d, ffn, "gate"), L(d, ffn, "up"), L(ffn, d, "down")
        eps = c.get("rms_norm_eps", 1e-5)
        s.n1, s.n2 = RMSNorm(d, eps), RMSNorm(d, eps)

    def forward(s, x, cos, sin):
        B, T, _ = x.shape
        h = s.n1(x)
        q = s.q(h).view(B, T, s.h, s.hd).transpose(1, 2)
        k = s.k(h).view(B, T, s.kvh, s.hd).transpose(1, 2)
        v = s.v(h).view(B, T, s.kvh, s.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=s.kvh != s.h)
        x = x + s.o(a.transpose(1, 2).reshape(B, T, -1))
        h = s.n2(x)
        return x + s.down(F.silu(s.gate(h)) * s.up(h))


class Model(nn.Module):
    def __init__(s, c, r, alpha, targets):
        super().__init__()
        s.emb = nn.Parameter(torch.randn(c["vocab_size"], c["hidden_size"], dtype=torch.bfloat16) * 0.02,
                             requires_grad=False)
        s.blocks = nn.ModuleList(Block(c, r, alpha, targets) for _ in range(c["num_hidden_layers"]))
        s.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-5))
        s.head = nn.Parameter(torch.randn(c["vocab_size"], c["hidden_size"], dtype=torch.bfloat16) * 0.02,
                              requires_grad=False)
        s.hd = c["hidden_size"] // c["num_attention_heads"]; s.theta = c.get("rope_theta", 10000.0)

    def forward(s, idx):
        T = idx.shape[1]
        inv = 1.0 / (s.theta ** (torch.arange(0, s.hd, 2, device=idx.device).float() / s.hd))
        f = torch.outer(torch.arange(T, device=idx.device).float(), inv)
        cos, sin = f.cos().bfloat16(), f.sin().bfloat16()  # (T, head_dim / 2): rope rotates halves
        x = F.embedding(idx, s.emb)
        for b in s.blocks:
            x = b(x, cos, sin)
        logits = F.linear(s.norm(x), s.head).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True); ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048); ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32); ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10); ap.add_argument("--mode", default="compile")
    ap.add_argument("--targets", default="q,k,v,o,gate,up,down"); ap.add_argument("--profile", type=int, default=0)
    a = ap.parse_args()
    c = json.load(open(a.config))
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = Model(c, a.r, a.alpha, set(a.targets.split(",")))
    if a.mode == "compile":
        for i, b in enumerate(m.blocks):  # per block, as TorchTitan compiles
            m.blocks[i] = torch.compile(b)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, fused=True)
    x = torch.randint(0, c["vocab_size"], (a.batch, a.seq), device="cuda")
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize(); t = time.perf_counter()
        m(x).backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); times.append(time.perf_counter() - t)
    step = statistics.median(times[a.warmup:])
    if a.profile:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.profile):
                m(x).backward(); opt.step(); opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        rows = [e for e in prof.key_averages() if e.device_time_total > 0]
        rows.sort(key=lambda e: -e.device_time_total)
        total = sum(e.device_time_total for e in rows) / 1e3 / a.profile
        print(json.dumps({"profile_steps": a.profile, "kernel_ms_per_step": round(total, 2)}))
        for e in rows[:30]:
            print(json.dumps({"kernel": e.key[:100], "calls_per_step": e.count / a.profile,
                              "ms_per_step": round(e.device_time_total / 1e3 / a.profile, 3)}))
    print(json.dumps({"mode": a.mode, "batch": a.batch, "seq": a.seq, "r": a.r, "targets": a.targets,
                      "trainable_params": sum(p.numel() for p in params), "step_s": round(step, 4),
                      "tokens_per_s": round(a.batch * a.seq / step, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
