"""torch.distributed's NCCL all_reduce and reduce_scatter bus bandwidth, measured the way
cohort-comm-bench measures cohort's (same sizes, same warmup/iters, same busbw formulas), so
the two tables can be put side by side. One process per GPU, spawned here.

    python3 benchmarks/torch_comm_bench.py --world-size 2 [--min-bytes N] [--max-bytes N] [--json]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def time_op(op, warmup, iters):
    for _ in range(warmup):
        op()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        op()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.world_size,
                            device_id=torch.device("cuda", rank))
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    n = args.world_size
    if rank == 0 and not args.json:
        print(f"# torch.distributed backend=nccl world={n} dtype={args.dtype} iters={args.iters}")
        print(f"{'op':<15} {'bytes':>14} {'time_us':>12} {'algbw_GB/s':>12} {'busbw_GB/s':>12}")
    size = args.min_bytes
    while size <= args.max_bytes:
        count = max(size // elem // n, 1) * n
        buf = torch.ones(count, dtype=dtype, device="cuda")
        out = torch.empty(count // n, dtype=dtype, device="cuda")
        results = [
            ("all_reduce", time_op(lambda: dist.all_reduce(buf), args.warmup, args.iters), 2 * (n - 1) / n),
            ("reduce_scatter",
             time_op(lambda: dist.reduce_scatter_tensor(out, buf), args.warmup, args.iters), (n - 1) / n),
        ]
        if rank == 0:
            nbytes = count * elem
            for op, seconds, factor in results:
                algbw = nbytes / seconds / 1e9
                if args.json:
                    print(f'{{"impl": "torch", "backend": "nccl", "op": "{op}", "bytes": {nbytes}, '
                          f'"world_size": {n}, "time_us": {seconds * 1e6:.2f}, '
                          f'"algbw_gbps": {algbw:.3f}, "busbw_gbps": {algbw * factor:.3f}}}', flush=True)
                else:
                    print(f"{op:<15} {nbytes:>14} {seconds * 1e6:>12.1f} {algbw:>12.2f} {algbw * factor:>12.2f}",
                          flush=True)
        size *= 2
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=torch.cuda.device_count())
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.world_size < 1 or args.world_size > torch.cuda.device_count():
        raise SystemExit(f"--world-size must be 1..{torch.cuda.device_count()} (the visible GPUs)")
    mp.spawn(worker, args=(args,), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
