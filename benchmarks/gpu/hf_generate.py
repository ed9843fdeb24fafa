"""transformers' generate() on one GPU: the baseline of `cohort-model generate --device cuda`.
The fast path transformers documents for it: a static KV cache, with which generate() compiles
the model's forward itself (torch.compile, fullgraph, mode "reduce-overhead": CUDA graphs);
--mode eager keeps its default dynamic cache and no compile. Greedy, eos ignored (min_new_tokens = max_new_tokens).
  python3 hf_generate.py --hf-dir DIR --prompts IDS.json [--batch 8] [--new-tokens 128]
                         [--dtype bf16|fp32] [--mode compile|eager] [--runs 3] [--tokens-out FILE]
IDS.json: {"input_ids": [[...], ...]} (rows of one length); the first --batch rows are used. Two
generate() calls warm up (compilation, graph capture), then --runs calls are timed. Prints one
JSON line: new tokens/s (all rows, median run), seconds, peak memory. --tokens-out writes the
first timed run's new tokens, one list per row."""
import argparse, json, statistics, time
import torch, transformers as T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hf-dir", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--mode", choices=["compile", "eager"], default="compile")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tokens-out")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    rows = json.load(open(a.prompts))["input_ids"][: a.batch]
    ids = torch.tensor(rows, device="cuda")
    model = T.AutoModelForCausalLM.from_pretrained(a.hf_dir, dtype=dtype).cuda().eval()
    if a.mode == "compile":
        # generate() compiles the forward itself for a static cache (its compile_config:
        # fullgraph, mode "reduce-overhead"), marking each CUDA graph step as it must.
        model.generation_config.cache_implementation = "static"
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
              do_sample=False, pad_token_id=0)
    with torch.no_grad():
        for _ in range(2):
            model.generate(ids, **kw)
        times, first = [], None
        for _ in range(a.runs):
            torch.cuda.synchronize(); t = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize(); times.append(time.perf_counter() - t)
            if first is None:
                first = out[:, ids.shape[1]:].tolist()
    if a.tokens_out:
        json.dump(first, open(a.tokens_out, "w"))
    s = statistics.median(times)
    print(json.dumps({"transformers": T.__version__, "torch": torch.__version__, "mode": a.mode, "dtype": a.dtype,
                      "compiled": getattr(model, "_compiled_call", None) is not None, "rows": ids.shape[0], "prompt_tokens": ids.shape[1], "new_tokens": a.new_tokens,
                      "seconds": round(s, 4), "new_tokens_per_s": round(ids.shape[0] * a.new_tokens / s, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}))


if __name__ == "__main__":
    main()
