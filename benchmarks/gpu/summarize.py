"""Turns scripts/gpu-bench's results folder into the markdown tables of BENCHMARKS.md "GPU":
collective bus bandwidth (cohort-comm-bench JSON lines and torch_comm_bench.py's table from
comm.log), training-step throughput (results.jsonl), with MFU and the ratios to PyTorch, ZeRO-3
beside FSDP2 on 2 GPUs (zero3.jsonl) and the model too large for one GPU (memory.jsonl).

    python3 benchmarks/gpu/summarize.py RESULTS_DIR

MFU = tokens/s * (6N + 12*L*d*T) / peak, N = all parameters (tied weights once), L layers,
d hidden size, T sequence length; peak = the card's dense bf16 tensor-core rate (below).
"""
import json
import os
import re
import sys

# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets, in FLOP/s.
PEAKS = [("H200 NVL", 835.0e12, "H200 NVL"), ("H200", 989.4e12, "H200 SXM"), ("H100 NVL", 835.0e12, "H100 NVL"),
         ("H100 PCIe", 756.0e12, "H100 PCIe"), ("H100", 989.4e12, "H100 SXM"),
         ("A100", 312.0e12, "A100")]


def card_peak(card):
    for key, peak, label in PEAKS:
        if key in card:
            return peak, label
    return None, card


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def comm_table(res):
    rows = {}  # (op, bytes) -> {impl: busbw}
    in_torch = False
    for line in read_lines(os.path.join(res, "comm.log")):
        if line.startswith("{"):
            r = json.loads(line)
            rows.setdefault((r["op"], int(r["bytes"])), {})["cohort"] = r["busbw_gbps"]
        elif line.startswith("# torch.distributed"):
            in_torch = True
        elif in_torch:
            m = re.match(r"^(all_reduce|reduce_scatter)\s+(\d+)\s+\S+\s+\S+\s+(\S+)$", line)
            if m:
                rows.setdefault((m.group(1), int(m.group(2))), {})["torch"] = float(m.group(3))
    if not rows:
        return "(no collective results: see comm.log)\n"
    lines = ["| op | bytes | cohort busbw GB/s | torch.distributed busbw GB/s | cohort / torch |",
             "|---|---:|---:|---:|---:|"]
    for (op, nbytes), v in sorted(rows.items()):
        c, t = v.get("cohort"), v.get("torch")
        ratio = f"{c / t:.2f}" if c and t else "-"
        size = f"{nbytes / 2**20:.0f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.0f} GiB"
        lines.append(f"| {op} | {size} | {c if c is not None else '-'} | "
                     f"{t if t is not None else '-'} | {ratio} |")
    return "\n".join(lines) + "\n"


def model_table(res, peak):
    results = [json.loads(l) for l in read_lines(os.path.join(res, "results.jsonl")) if l.startswith("{")]
    if not results:
        return "(no model results: see model-cohort.log and model-torch.log)\n"
    order = ["cohort-cohort", "cohort-fused", "torch-eager", "torch-compile"]
    lines = ["| model | impl | batch x seq | params | step ms | tokens/s | MFU | peak GPU mem GiB "
             "| vs torch eager | vs torch.compile |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in sorted({r["config"] for r in results}):
        group = {r["impl"]: r for r in results if r["config"] == name}
        label = os.path.basename(name).replace(".json", "")
        eager, comp = group.get("torch-eager"), group.get("torch-compile")
        for impl in order + sorted(set(group) - set(order)):
            r = group.get(impl)
            if r is None:
                lines.append(f"| {label} | {impl} | - | - | - | failed/not run | - | - | - | - |")
                continue
            flops = 6 * r["params"] + 12 * r["layers"] * r["hidden"] * r["seq"]
            mfu = f"{r['tokens_per_s'] * flops / peak:.3f}" if peak else "-"
            ve = f"{r['tokens_per_s'] / eager['tokens_per_s']:.2f}x" if eager else "-"
            vc = f"{r['tokens_per_s'] / comp['tokens_per_s']:.2f}x" if comp else "-"
            lines.append(f"| {label} | {impl} | {r['batch']}x{r['seq']} | {r['params'] / 1e6:.1f}M | "
                         f"{r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                         f"{r['peak_mem_gib']:.1f} | {ve} | {vc} |")
    return "\n".join(lines) + "\n"


def read_jsonl(res, name):
    """Every JSON object of the file's lines starting with "{"; processes printing at the same
    time can leave two objects on one line."""
    decoder, out = json.JSONDecoder(), []
    for line in read_lines(os.path.join(res, name)):
        at = 0
        while line.startswith("{", at):
            obj, at = decoder.raw_decode(line, at)
            out.append(obj)
    return out


def mfu_text(r, peak):
    if not peak:
        return "-"
    flops = 6 * r["params"] + 12 * r["layers"] * r["hidden"] * r["seq"]
    return f"{r['tokens_per_s'] * flops / (peak * r['world']):.3f}"


def zero3_table(res, peak):
    results = read_jsonl(res, "zero3.jsonl")
    if not results:
        return "(no ZeRO-3 / FSDP2 results: see zero3.log)\n"
    by_impl = {}
    for r in results:
        by_impl.setdefault(r["impl"], []).append(r)
    fsdp = by_impl.get("torch-fsdp2")
    lines = ["| impl | GPUs | batch per GPU x seq | params | step ms | tokens/s | MFU "
             "| peak GPU mem GiB (max over ranks) | vs FSDP2 |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for impl in ["cohort-zero3", "cohort-zero3-ac", "torch-fsdp2", "torch-fsdp2-ac"]:
        ranks = by_impl.get(impl)
        if not ranks:
            lines.append(f"| {impl} | - | - | - | - | failed/not run | - | - | - |")
            continue
        r = min(ranks, key=lambda x: x["rank"])
        vs = f"{r['tokens_per_s'] / fsdp[0]['tokens_per_s']:.2f}x" if fsdp else "-"
        lines.append(f"| {impl} | {r['world']} | {r['batch']}x{r['seq']} | {r['params'] / 1e6:.1f}M | "
                     f"{r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | {mfu_text(r, peak)} | "
                     f"{max(x['peak_mem_gib'] for x in ranks):.1f} | {vs} |")
    return "\n".join(lines) + "\n"


def memory_table(res, card_mib):
    results = read_jsonl(res, "memory.jsonl")
    if not results:
        return "(no result: see memory.log)\n"
    n = results[0]["params"]
    need = 16 * n / 2**30
    lines = [f"Model: {n / 1e9:.2f}B parameters ({results[0]['layers']} layers, d {results[0]['hidden']}); "
             f"fp32 weights + gradients + AdamW moments = 16 B/param = {need:.1f} GiB, "
             f"one card holds {card_mib / 1024:.1f} GiB." if card_mib else "",
             "",
             "| rank | device | peak GPU mem GiB | step ms | tokens/s | loss after warmup | loss |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in sorted(results, key=lambda x: x["rank"]):
        lines.append(f"| {r['rank']} | {r['device']} | {r['peak_mem_gib']:.1f} | {r['step_ms']:.0f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['loss_after_warmup']:.3f} | {r['loss']:.3f} |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: summarize.py RESULTS_DIR")
    res = sys.argv[1]
    env = read_lines(os.path.join(res, "env.txt"))
    card = next((l.split(",")[1].strip() for l in env if re.match(r"^\d+,", l)), "unknown card")
    card_mib = next((float(l.split(",")[2].split()[0]) for l in env if re.match(r"^\d+,", l)), None)
    peak, label = card_peak(card)
    print("## Environment\n")
    print("```\n" + "\n".join(env) + "\n```\n")
    print(f"MFU divides by {peak / 1e12:.1f} TFLOP/s, the dense bf16 peak of the {label}."
          if peak else f"No known bf16 peak for {card}: MFU not computed.")
    print("\n## Collectives, 2 GPUs, float32, NCCL (bus bandwidth as nccl-tests)\n")
    print(comm_table(res))
    tests = read_lines(os.path.join(res, "test.log"))
    print("NCCL correctness tests (`test_core_comm \"[gpu]\"`): " +
          (" / ".join(l for l in tests[-3:] if l.strip()) or "not run") + "\n")
    print("## Training step, one GPU, bf16 (FLOPs/token = 6N + 12·L·d·T)\n")
    print(model_table(res, peak))
    print("## ZeRO-3 on 2 GPUs: cohort's engine beside PyTorch FSDP2, bf16, TinyLlama-1.1B shape\n")
    print(zero3_table(res, peak))
    print("## A model whose fp32 AdamW state does not fit one GPU, ZeRO-3 on 2 GPUs\n")
    print(memory_table(res, card_mib))


if __name__ == "__main__":
    main()
