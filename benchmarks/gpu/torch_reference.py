"""Plain PyTorch reference for model_step_bench: the same architecture (transformers'
GPT2LMHeadModel / LlamaForCausalLM built from the same config JSON, random init, SDPA attention),
fp32 weights under bf16 autocast, fused torch.optim.AdamW, eager or under torch.compile. Prints one
JSON line with the fields model_step_bench prints.

    python3 benchmarks/gpu/torch_reference.py --config benchmarks/gpu/gpt2-124m.json \
        --batch 8 --seq 1024 [--compile] [--steps 10] [--warmup 3] [--profile N]

--profile N: after the timed steps, N more steps under torch.profiler, then one JSON line per GPU
kernel (the 40 longest in total), as model_step_bench --profile prints them.
"""
import argparse
import json
import math
import time

import torch
import transformers


def build_model(config_path):
    with open(config_path) as f:
        raw = json.load(f)
    model_type = raw.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **raw)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model, config


def profile_kernels(steps, step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            loss = step()
        loss.item()
    totals = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = totals.setdefault(e.name, [0.0, 0])
        t[0] += e.time_range.elapsed_us()
        t[1] += 1
    all_us = sum(t[0] for t in totals.values())
    print(json.dumps({"profile_steps": steps, "kernel_ms_per_step": all_us / 1e3 / steps,
                      "kernels": len(totals)}))
    for name, (us, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:40]:
        print(json.dumps({"kernel": name[:160], "calls_per_step": calls / steps,
                          "ms_per_step": us / 1e3 / steps, "share": us / all_us if all_us else 0.0}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--profile", type=int, default=0)
    args = p.parse_args()

    device = torch.device("cuda")
    model, config = build_model(args.config)
    model.to(device).train()
    params = sum(t.numel() for t in model.parameters())  # tied weights count once
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    forward = torch.compile(model) if args.compile else model
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        loss = step()
    loss.item()  # waits for the warmup steps (and compilation)
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    last = loss.item()  # waits for the timed steps
    took = time.perf_counter() - start
    if not math.isfinite(last):
        raise SystemExit("torch_reference.py: loss is not finite after the timed steps")
    step_s = took / args.steps
    print(json.dumps({
        "impl": "torch-compile" if args.compile else "torch-eager",
        "config": args.config,
        "params": params,
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "batch": args.batch,
        "seq": args.seq,
        "steps": args.steps,
        "step_ms": step_s * 1e3,
        "tokens_per_s": args.batch * args.seq / step_s,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": last,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }), flush=True)
    if args.profile > 0:
        profile_kernels(args.profile, step)


if __name__ == "__main__":
    main()
