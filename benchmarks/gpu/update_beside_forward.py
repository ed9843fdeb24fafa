"""Would AdamW's update hide under the next step's forward? A decoder's forward (its GEMMs, cuDNN
attention, SwiGLU, the LM head in chunks of 2048 tokens) at a benchmark job's shapes, bf16 with
pseudo-random data, timed sustained (6 medians of 3 passes): alone; AdamW over the units' fp32
masters (torch's fused kernel and the copy to bf16 weights, one launch a unit) alone; the update
and then the forward on one stream; and each unit's update on a low-priority stream that the
forward of layer i waits for, the forward on a high-priority one. Prints what the overlap saved.
Shapes: the 1.1B (8 x 2048), GPT-2 124M (16 x 1024), the 7B with half the update (ZeRO-3 on 2 GPUs,
2 x 2048).
  python3 update_beside_forward.py [1.1b gpt2 7b-z3]
"""
import sys, time, torch, torch.nn.functional as F

SHAPES = {  # d, ffn, heads, kv, layers, batch, seq, vocab, share of the update (ZeRO-3 on 2)
    "1.1b": (2048, 5632, 32, 4, 22, 8, 2048, 32000, 1.0),
    "gpt2": (768, 3072, 12, 12, 12, 16, 1024, 50304, 1.0),
    "7b-z3": (4096, 11008, 32, 32, 32, 2, 2048, 32000, 0.5),
}

def run(name, iters=6):
    d, ffn, h, kv, L, B, T, V, share = SHAPES[name]
    hd = d // h
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    def rnd(*s, dt=torch.bfloat16, sc=0.02):
        return (torch.randn(*s, device=dev, generator=g) * sc).to(dt)
    W = [dict(qkv=rnd((h + 2 * kv) * hd, d), o=rnd(d, d), gu=rnd(2 * ffn, d), down=rnd(d, ffn)) for _ in range(L)]
    head = rnd(V, d)
    x0 = rnd(B * T, d, sc=1.0)
    layer_n = int(((h + 2 * kv) * hd * d + d * d + 3 * ffn * d + 2 * d) * share)
    unit_sizes = [int(2 * V * d * share)] + [layer_n] * L
    P = [torch.randn(n, device=dev, generator=g) * 0.02 for n in unit_sizes]
    G = [torch.randn(n, device=dev, generator=g) * 1e-3 for n in unit_sizes]
    M = [torch.zeros(n, device=dev) for n in unit_sizes]
    Vv = [torch.zeros(n, device=dev) for n in unit_sizes]
    Wb = [torch.empty(n, device=dev, dtype=torch.bfloat16) for n in unit_sizes]
    steps = [torch.zeros((), device=dev) for _ in unit_sizes]

    def update(i):
        torch._fused_adamw_([P[i]], [G[i]], [M[i]], [Vv[i]], [], [steps[i]], lr=1e-4, beta1=0.9, beta2=0.95,
                            weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)
        Wb[i].copy_(P[i])

    def layer(x, w):
        q, k, v = F.linear(x, w["qkv"]).split([h * hd, kv * hd, kv * hd], -1)
        q = q.view(B, T, h, hd).transpose(1, 2); k = k.view(B, T, kv, hd).transpose(1, 2)
        v = v.view(B, T, kv, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != h)
        x = x + F.linear(y.transpose(1, 2).reshape(B * T, d), w["o"])
        a, b = F.linear(x, w["gu"]).chunk(2, -1)
        return x + F.linear(F.silu(a) * b, w["down"])

    side = torch.cuda.Stream(priority=0)  # the lowest
    main = torch.cuda.Stream(priority=-1)
    torch.cuda.set_stream(main)
    def forward(wait=None):
        x = x0
        if wait: main.wait_event(wait[0])
        for l in range(L):
            if wait: main.wait_event(wait[l + 1])
            x = layer(x, W[l])
        for c in range(0, B * T, 2048):
            F.linear(x[c:c + 2048], head)
        return x

    def sequential():
        for i in range(len(P)): update(i)
        forward()
    def overlapped():
        start = torch.cuda.Event(); start.record(main)
        evs = []
        with torch.cuda.stream(side):
            side.wait_event(start)
            for i in range(len(P)):
                update(i); e = torch.cuda.Event(); e.record(side); evs.append(e)
        forward(evs)
    def fwd_only(): forward()
    def upd_only():
        for i in range(len(P)): update(i)

    def timeit(f, n):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): f()
        torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3

    for f in (sequential, overlapped, fwd_only, upd_only): timeit(f, 2)
    rows = {k: [] for k in ("fwd", "upd", "seq", "ovl")}
    for _ in range(iters):
        rows["fwd"].append(timeit(fwd_only, 3)); rows["upd"].append(timeit(upd_only, 3))
        rows["seq"].append(timeit(sequential, 3)); rows["ovl"].append(timeit(overlapped, 3))
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
    print(f"{name}: forward {med['fwd']:.2f} ms, update {med['upd']:.2f} ms, sequential {med['seq']:.2f} ms, "
          f"overlapped {med['ovl']:.2f} ms: saves {med['seq'] - med['ovl']:.2f} ms "
          f"({(med['seq'] - med['ovl']) / med['upd'] * 100:.0f}% of the update)", flush=True)
    torch.cuda.synchronize(); torch.cuda.set_stream(torch.cuda.default_stream())
    del W, P, G, M, Vv, Wb; torch.cuda.empty_cache()

if __name__ == "__main__":
    for n in (sys.argv[1:] or list(SHAPES)): run(n)
