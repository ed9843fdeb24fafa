"""PyTorch FSDP2 reference for engine_bench: transformers' LlamaForCausalLM / GPT2LMHeadModel from
the same config JSON (random init, SDPA attention), each decoder layer and then the root wrapped with
torch.distributed.fsdp.fully_shard (ZeRO-3: parameters, gradients and optimizer state sharded),
bf16 parameters for compute with fp32 reduction and fp32 sharded master weights
(MixedPrecisionPolicy), AdamW; one process per GPU, started here. Prints one JSON line per rank with
the fields engine_bench prints (tokens/s of the whole group, this rank's peak GPU memory).

    python3 benchmarks/gpu/torch_fsdp.py --config benchmarks/gpu/tinyllama-1.1b.json \
        --world 2 --batch 4 --seq 2048 [--steps 10] [--warmup 3] [--checkpointing]
"""
import argparse
import json
import math
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(config_path):
    import transformers
    with open(config_path) as f:
        raw = json.load(f)
    model_type = raw.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **raw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model, config


def decoder_layers(model):
    inner = getattr(model, "model", None) or getattr(model, "transformer")
    return list(getattr(inner, "layers", None) or getattr(inner, "h"))


def worker(rank, args, port):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.world, device_id=torch.device("cuda", rank))
    model, config = build_model(args.config)
    params = sum(t.numel() for t in model.parameters())
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.train()
    optimizer_kind = "fused"
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    except (RuntimeError, ValueError):
        optimizer_kind = "foreach"
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda", generator=generator)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        loss = step()
    loss.item()
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    last = loss.item()
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    if not math.isfinite(last):
        raise SystemExit(f"torch_fsdp.py rank {rank}: loss is not finite after the timed steps")
    step_s = took / args.steps
    print(json.dumps({
        "impl": "torch-fsdp2" + ("-ac" if args.checkpointing else ""),
        "config": args.config,
        "device": torch.cuda.get_device_name(rank),
        "rank": rank,
        "world": args.world,
        "params": params,
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "batch": args.batch,
        "seq": args.seq,
        "steps": args.steps,
        "step_ms": step_s * 1e3,
        "tokens_per_s": args.world * args.batch * args.seq / step_s,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "loss": last,
        "optimizer": optimizer_kind,
        "torch": torch.__version__,
    }), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--checkpointing", action="store_true",
                   help="recompute each decoder layer in backward (as cohort does with train.activation_checkpointing)")
    args = p.parse_args()
    if torch.cuda.device_count() < args.world:
        raise SystemExit(f"torch_fsdp.py: --world {args.world} needs that many GPUs, "
                         f"this machine has {torch.cuda.device_count()}")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
