#!/usr/bin/env python3
"""Summarises one GPU cluster job of scripts/gpu-cluster-test as markdown: tokens/s per GPU and MFU
(median over the steps after the first 3), the peak GPU memory and host RSS each rank logged,
against what `submit plan --json` predicted for a rank.

usage: cluster_summary.py LABEL METRICS.jsonl JOB.log PLAN.json
"""
import json
import re
import statistics
import sys

GIB = 1024 ** 3


def wall_tokens_per_s(rows, after_step):
    """Tokens/s over wall time (the job's, all ranks): the median over the metrics lines of steps
    past `after_step` of a step's tokens over the time since the line before it (its `time`), so
    the run loop's work between steps counts, which `step_s` leaves out, and a profiled step's
    trace writing does not (a median). 0 without `time` in the lines."""
    timed = [r for r in rows if "time" in r]
    walls = [b["tokens_per_s"] * b["step_s"] / (b["time"] - a["time"])
             for a, b in zip(timed, timed[1:]) if b["step"] > after_step and b["time"] > a["time"]]
    return statistics.median(walls) if walls else 0


def main():
    label, metrics_path, log_path, plan_path = sys.argv[1:5]
    rows = [json.loads(l) for l in open(metrics_path) if l.strip().startswith("{")]
    timed = rows[3:] if len(rows) > 4 else rows
    log = open(log_path, errors="replace").read()
    world = len(set(re.findall(r"rank (\d+)/\d+ on node", log))) or 1
    tps = statistics.median(r["tokens_per_s"] for r in timed) if timed else 0.0
    mfu = statistics.median(r.get("mfu", 0.0) for r in timed) if timed else 0.0
    print(f"### {label}: {len(rows)} steps on {world} GPUs")
    print(f"- throughput: {tps / world:,.0f} tokens/s per GPU ({tps:,.0f} in all), MFU {mfu:.3f} "
          f"(median of steps {min(4, len(rows))}..{len(rows)}), final loss {rows[-1]['loss']:.4f}" if rows else "- no steps")
    if timed and "step_s" in timed[0]:
        step_s = statistics.median(r["step_s"] for r in timed)
        opt_s = statistics.median(r.get("optimizer_s", 0.0) for r in timed)
        print(f"- rank 0's step: {step_s:.2f} s, of which the optimizer's update {opt_s:.2f} s (medians)")

    plan = {}
    try:
        plan = json.load(open(plan_path))
    except (OSError, ValueError) as e:
        print(f"- plan: unreadable ({e})")
    memory = plan.get("memory", plan)
    per_rank = memory.get("per_rank", memory)
    plan_gpu = per_rank.get("device_bytes")
    plan_host = per_rank.get("host_bytes")
    plan_load = per_rank.get("load_peak_host_bytes")
    # The allocator's peak counts tensors only: the plan's allowance for the CUDA context and
    # the allocator's slack is left out of what it is compared with.
    context = memory.get("cuda_context_bytes", 0)

    peak = (r"GPU peak ([\d.]+) GiB allocated, ([\d.]+) GiB reserved; host peak RSS ([\d.]+) GiB")
    done = re.findall(r"rank (\d+) (?:done|memory after step \d+): .*?" + peak, log)
    done = list({r: (r, a, res, rss) for r, a, res, rss in done}.values())  # the last line of each rank
    # The training peak: after the second step, before any checkpoint of the run's end.
    trained = dict((r, float(h)) for r, _, _, h in re.findall(r"rank (\d+) memory after step \d+: .*?" + peak, log))
    loaded = dict((r, float(h)) for r, h in re.findall(
        r"rank (\d+)/\d+ on node .*?after loading: .*?host peak RSS ([\d.]+) GiB", log))
    print("\n| rank | GPU peak allocated | GPU peak reserved | plan GPU | host peak RSS after load | "
          "host peak RSS after step 2 | host peak RSS, whole run | plan host (load peak) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    fmt = lambda b: f"{b / GIB:.1f} GiB" if b else "?"
    for rank, alloc, reserved, rss in sorted(done, key=lambda t: int(t[0])):
        print(f"| {rank} | {float(alloc):.1f} GiB | {float(reserved):.1f} GiB | {fmt(plan_gpu)} | "
              f"{loaded.get(rank, 0):.1f} GiB | {trained.get(rank, 0):.1f} GiB | {float(rss):.1f} GiB | "
              f"{fmt(plan_host)} ({fmt(plan_load)}) |")
    if done and plan_gpu:
        worst = max(float(a) for _, a, _, _ in done) * GIB
        tensors = plan_gpu - context
        print(f"\nplan vs measured GPU peak (tensors, allocated): {tensors / GIB:.1f} vs {worst / GIB:.1f} GiB "
              f"({(tensors - worst) / worst * 100:+.0f}%); the plan with {context / GIB:.1f} GiB for the CUDA "
              f"context and allocator: {plan_gpu / GIB:.1f} GiB")
    if done and plan_host:
        worst = max(float(r) for _, _, _, r in done) * GIB
        print(f"plan vs measured host peak RSS: {plan_host / GIB:.1f} vs {worst / GIB:.1f} GiB "
              f"({(plan_host - worst) / worst * 100:+.0f}%)")
        if trained:
            growth = max(float(r) - trained.get(k, float(r)) for k, _, _, r in done)
            print(f"host RSS the end (final checkpoint, export) added over the training peak: at most "
                  f"{growth:.2f} GiB per rank")


if __name__ == "__main__":
    main()
