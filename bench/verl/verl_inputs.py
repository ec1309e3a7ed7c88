"""The inputs both engines of bench_verl_engines.py read: one HF directory (Qwen2, random init from a seed) and the
token data of every step, written once by the parent process."""
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
from reference_fsdp2 import SHAPES as GPU_BENCH_SHAPES  # noqa: E402  (shared with bench/gpu)

# The dense Qwen2.5 shapes: this benchmark writes a Qwen2 checkpoint (an MoE shape of bench/gpu is not one).
SHAPES = {name: shape for name, shape in GPU_BENCH_SHAPES.items() if "num_experts" not in shape}


def model_shape(args):
    """The Qwen2 config of --model: a released Qwen2.5 shape, or `custom` from the shape flags."""
    if args.model != "custom":
        return dict(SHAPES[args.model])
    return dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                tie_word_embeddings=False)


def write_model(path, args, device):
    """Random init on `device` (a 3B model builds in seconds on a GPU, minutes on a CPU); bf16 files for the released
    shapes (both engines load them into fp32 masters), fp32 for `custom`. Returns the parameter count."""
    import torch
    import transformers
    config = transformers.Qwen2Config(**model_shape(args), rope_theta=1000000.0, rms_norm_eps=1e-6,
                                      max_position_embeddings=max(4096, args.prompt_len[1] + args.response_len[1]))
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config)
    if args.model != "custom":
        model.to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size="20GB")
    count = sum(p.numel() for p in model.parameters())
    del model
    return count


def response_length(rng, lo, hi, median):
    """Uniform over [lo, hi], or log-normal around `median` clipped to [lo, hi] (RL responses: most short, a tail
    up to the generation cap)."""
    if median is None:
        return rng.randint(lo, hi)
    return min(hi, max(lo, round(math.exp(rng.gauss(math.log(median), 0.75)))))


def write_data(path, model_dir, args, device):
    """Per step: prompts, responses (token lists), one advantage per sequence and the responses' old log-probs:
    the initial weights' (transformers, sdpa) plus Gaussian noise (--old-logprob-noise), standing in for a rollout
    engine's. Without the noise the first importance ratio would be 1 and the first loss -mean(advantage) whatever
    the engine computed; with it the loss depends on the engine's log-probs and the clip range cuts some tokens."""
    import torch
    import transformers
    rng = random.Random(args.seed)
    vocab = model_shape(args)["vocab_size"]
    steps = []
    for _ in range(args.batches):
        prompts = [[rng.randrange(1, vocab) for _ in range(rng.randint(*args.prompt_len))] for _ in range(args.rows)]
        responses = [[rng.randrange(1, vocab)
                      for _ in range(response_length(rng, *args.response_len[:2], args.response_median))]
                     for _ in range(args.rows)]
        steps.append({"prompts": prompts, "responses": responses,
                      "advantages": [rng.gauss(0.0, 1.0) for _ in range(args.rows)]})
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
    model.to(device).eval()
    noise = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for step in steps:
            old = []
            for p, r in zip(step["prompts"], step["responses"]):
                ids = torch.tensor([p + r], device=device)
                logits = model(ids).logits[0, len(p) - 1:-1].float()
                lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(p):, None]).squeeze(-1).cpu()
                old.append(lp + args.old_logprob_noise * torch.randn(len(r), generator=noise))
            step["old_log_probs"] = old
    del model
    if device != "cpu":
        torch.cuda.empty_cache()
    torch.save(steps, path)
    return steps


def prepare(work, args):
    """The model and the data in `work`, written unless a previous run with the same input arguments left them there
    (a warm GPU machine between two device calls). Returns the parameter count."""
    import time
    keys = ("model", "hidden", "intermediate", "layers", "heads", "kv_heads", "vocab", "rows", "prompt_len",
            "response_len", "response_median", "batches", "old_logprob_noise", "seed", "device")
    wanted = {k: getattr(args, k) for k in keys}
    wanted["prompt_len"], wanted["response_len"] = list(args.prompt_len), list(args.response_len)
    stamp = os.path.join(work, "inputs.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            seen = json.load(f)
        if seen["inputs"] == wanted:
            print(f"reusing the model and data in {work}", flush=True)
            return seen["params"]
        os.remove(stamp)
    print(f"writing the {args.model} model and {args.batches} batches of {args.rows} sequences to {work}", flush=True)
    t = time.perf_counter()
    params = write_model(os.path.join(work, "model"), args, args.device)
    write_data(os.path.join(work, "data.pt"), os.path.join(work, "model"), args, args.device)
    with open(stamp, "w") as f:
        json.dump({"inputs": wanted, "params": params}, f)
    print(f"  inputs written in {time.perf_counter() - t:.0f} s", flush=True)
    return params
