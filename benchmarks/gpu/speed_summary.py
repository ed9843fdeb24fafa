"""Turns scripts/gpu-speed's results folder into markdown tables: one GPU (cohort's step beside the
plain-PyTorch baseline's eager and torch.compile step), ZeRO-3 over the machine's GPUs beside FSDP2
(1.1B and 7B shapes), the collectives beside torch.distributed, the GPU tests' exit statuses and the longest kernels of cohort's 1.1B and GPT-2 steps.

    python3 benchmarks/gpu/speed_summary.py RESULTS_DIR

MFU = tokens/s * (6N + 12*L*d*T) / 989e12 per GPU (H100/H200 SXM dense bf16), as the baselines
print it; N counts every parameter once.
"""
import json
import os
import re
import sys

from summarize import comm_table  # the collectives' table, as scripts/gpu-bench prints it

PEAK = 989e12
BASE_ONE = re.compile(r"^(\S+)\s+(eager|compile)\s+params\s+([\d.]+)M\s+step\s+([\d.]+) ms\s+tok/s\s+(\d+)"
                      r"\s+MFU\s+([\d.]+)\s+peak\s+([\d.]+) GiB")
BASE_FSDP = re.compile(r"^(\S+)\s+fsdp2(\+ac)? x(\d+) batch (\d+)\s+step\s+([\d.]+) ms\s+tok/s/GPU\s+(\d+)"
                       r"\s+MFU\s+([\d.]+)\s+peak\s+([\d.]+) GiB")
NAMES = {"tinyllama-1.1b": "llama-1b", "gpt2-124m": "gpt2-124m", "llama2-7b": "llama-7b"}


def lines(res, name):
    try:
        with open(os.path.join(res, name)) as f:
            return f.read().splitlines()
    except OSError:
        return []


def objects(res, name):
    out, decoder = [], json.JSONDecoder()
    for line in lines(res, name):
        at = 0
        while line.startswith("{", at):
            obj, at = decoder.raw_decode(line, at)
            out.append(obj)
    return out


def model_name(config):
    return NAMES.get(os.path.basename(config).replace(".json", ""), config)


def one_gpu(res):
    rows = {}  # model -> list of (impl, batch, step_ms, tok/s, mfu, peak)
    for r in objects(res, "one-cohort.log"):
        if "impl" not in r:
            continue
        flops = 6 * r["params"] + 12 * r["layers"] * r["hidden"] * r["seq"]
        if r["impl"].startswith("cohort-zero"):  # engine_bench: the training engine's own step
            label = "cohort engine (ZeRO-0, 1 rank)"
        else:  # model_step_bench: the step with the optimizer it names
            path = "plain path" if r.get("compute_path") == "plain" else "fused path"
            optimizer = {"kernel": "AdamW kernel", "fused": "ATen fused AdamW", "cohort": "adamw_step"}
            label = f"cohort step, {path}, {optimizer.get(r['impl'].split('-')[1], r['impl'])}"
        rows.setdefault(model_name(r["config"]), []).append(
            (label, r["batch"], r["step_ms"], r["tokens_per_s"], r["tokens_per_s"] * flops / PEAK,
             r["peak_mem_gib"]))
    for line in lines(res, "one-baseline.log"):
        m = BASE_ONE.match(line)
        if m:
            name, mode = m.group(1), m.group(2)
            step_ms, tps = float(m.group(4)), float(m.group(5))
            rows.setdefault(name, []).append((f"PyTorch {mode}", None, step_ms, tps, float(m.group(6)),
                                              float(m.group(7))))
    if not rows:
        return "(no one-GPU results: see one-cohort.log and one-baseline.log)\n"
    out = ["| model | impl | step ms | tokens/s | MFU | peak GiB | vs PyTorch compile |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for name, group in rows.items():
        comp = next((g for g in group if g[0] == "PyTorch compile"), None)
        for impl, _, step_ms, tps, mfu, peak in group:
            vs = f"{tps / comp[3]:.2f}x" if comp else "-"
            out.append(f"| {name} | {impl} | {step_ms:.1f} | {tps:,.0f} | {mfu:.3f} | {peak:.1f} | {vs} |")
    return "\n".join(out) + "\n"


def zero3(res, log):
    cohort = [r for r in objects(res, log) if r.get("impl", "").startswith("cohort-zero")]
    fsdp = [BASE_FSDP.match(l) for l in lines(res, log)]
    fsdp = [m for m in fsdp if m]
    if not cohort and not fsdp:
        return f"(no results: see {log})\n"
    out = ["| impl | GPUs | batch per GPU x seq | step ms | tokens/s per GPU | MFU | peak GiB (max rank) | vs FSDP2 |",
           "|---|---:|---|---:|---:|---:|---:|---:|"]
    base = float(fsdp[0].group(6)) if fsdp else None
    if cohort:
        r = min(cohort, key=lambda x: x["rank"])
        per_gpu = r["tokens_per_s"] / r["world"]
        flops = 6 * r["params"] + 12 * r["layers"] * r["hidden"] * r["seq"]
        vs = f"{per_gpu / base:.2f}x" if base else "-"
        out.append(f"| cohort ZeRO-3 | {r['world']} | {r['batch']}x{r['seq']} | {r['step_ms']:.1f} | {per_gpu:,.0f} | "
                   f"{per_gpu * flops / PEAK:.3f} | {max(x['peak_mem_gib'] for x in cohort):.1f} | {vs} |")
    for m in fsdp:
        out.append(f"| PyTorch FSDP2{' + AC' if m.group(2) else ''} | {m.group(3)} | {m.group(4)}x2048 | "
                   f"{float(m.group(5)):.1f} | {float(m.group(6)):,.0f} | {m.group(7)} | {m.group(8)} | 1.00x |")
    return "\n".join(out) + "\n"


def profile(res, log):
    kernels = [r for r in objects(res, log) if "kernel" in r]
    total = next((r for r in objects(res, log) if "kernel_ms_per_step" in r), None)
    if not kernels:
        return f"(no profile: see {log})\n"
    out = [f"GPU kernel time per step: {total['kernel_ms_per_step']:.1f} ms over {total['kernels']} kernels"
           if total else "", "", "| kernel | calls/step | ms/step | share |", "|---|---:|---:|---:|"]
    for r in kernels[:20]:
        out.append(f"| `{r['kernel'][:90]}` | {r['calls_per_step']:.0f} | {r['ms_per_step']:.2f} | {r['share']:.1%} |")
    idle = next((r for r in objects(res, log) if "gpu_idle_ms_per_step" in r), None)
    if idle:
        out += ["", f"GPU idle per step (between two of its operations): {idle['gpu_idle_ms_per_step']:.2f} ms",
                "", "| idle between | gaps/step | ms/step |", "|---|---:|---:|"]
        for r in [r for r in objects(res, log) if "idle_between" in r][:8]:
            out.append(f"| `{r['idle_between'][:120]}` | {r['gaps_per_step']:.0f} | {r['ms_per_step']:.2f} |")
    return "\n".join(out) + "\n"


def main(res):
    env = "\n".join(lines(res, "env.txt"))
    print("Machine and versions:\n\n```\n" + env + "\n```\n")
    print("GPU tests: " + "; ".join(l for l in lines(res, "test.log") if "exit status" in l) + "\n")
    print("### One GPU\n\n" + one_gpu(res))
    print("### ZeRO-3, TinyLlama-1.1B shape\n\n" + zero3(res, "zero3.log"))
    print("### ZeRO-3, Llama-2-7B shape\n\n" + zero3(res, "zero3-7b.log"))
    print("### Collectives through cohort's NCCL group beside torch.distributed\n\n" + comm_table(res))
    print("### Longest kernels of cohort's 1.1B step (fused path)\n\n" + profile(res, "profile.log"))
    print("### Longest kernels of cohort's GPT-2 step (fused path)\n\n" + profile(res, "profile-gpt2.log"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
