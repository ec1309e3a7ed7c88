#!/usr/bin/env python3
"""Writes one RL-shaped batch (issue 16) as a safetensors file, so the reference (reference_rl_fsdp2.py) and the
engine (bench_rl_step) train on exactly the same tensors. Plain python3 (no numpy, no torch): the CPU machine has
neither, and python's `random` gives the same batch everywhere for one seed.

Shape of the data, as a GRPO step sees it:
  prompt lengths    uniform integers in [--prompt-min, --prompt-max]
  response lengths  L = clip(round(exp(mu + sigma * Z)), --resp-min, --resp-cap), Z ~ N(0, 1), mu = ln(median),
                    sigma = --resp-sigma. A lognormal's median is exp(mu), and clipping both ends keeps it; the cap
                    plays the truncation at the maximum response length that real rollouts hit. Defaults (median
                    1000, sigma 0.8, cap 3072, min 16): median 1000, mean 1248, p90 2788, 8% of responses at the
                    cap (the script prints these, computed, next to what the sample drew).
  token ids         uniform in [0, --vocab)
Both lengths are drawn stratified (one draw per quantile bin, shuffled), so a batch of 64 follows the distribution.
Layout (verl's): prompt LEFT-padded to the batch's longest prompt P, response RIGHT-padded to the batch's longest
response R, every row P + R long. Tensors ([num_seqs, P + R]):
  input_ids (I64, pad id 0), attention_mask (I64, 1 = real token), loss_mask (F32, 1 on response tokens),
  old_log_probs (F32, response tokens: --old-logp-center + N(0, --old-logp-spread), else 0),
  advantages (F32, one N(0, 1) per sequence on its response tokens, GRPO-like, else 0).
The default old_log_probs centre is -ln(vocab), what a random-init policy assigns to random tokens, so the PPO ratio
starts near 1 and the clip engages on part of the tokens as in a real step (with -2 every ratio would be ~e^-10).
"""
import argparse
import array
import json
import math
import random
import struct
import sys
from statistics import NormalDist


def response_length_stats(median, sigma, lo, cap):
    """Median, mean and p90 of the clipped lognormal, and the fraction at the cap (closed forms)."""
    n, mu = NormalDist(), math.log(median)
    z_cap, z_lo = (math.log(cap) - mu) / sigma, (math.log(lo) - mu) / sigma
    # E[min(max(X, lo), cap)] = E[X; lo < X < cap] + cap P(X >= cap) + lo P(X <= lo), X lognormal
    mean = (math.exp(mu + sigma ** 2 / 2) * (n.cdf(z_cap - sigma) - n.cdf(z_lo - sigma))
            + cap * (1 - n.cdf(z_cap)) + lo * n.cdf(z_lo))
    p90 = min(cap, max(lo, math.exp(mu + sigma * n.inv_cdf(0.9))))
    return dict(median=min(cap, max(lo, median)), mean=mean, p90=p90, at_cap=1 - n.cdf(z_cap))


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def draw(args):
    """The batch's lengths and per-token values, from one seeded generator (in a fixed order)."""
    rng = random.Random(args.seed)
    # Stratified: one draw per quantile bin (i + u) / N, shuffled, so that 64 rows follow the distribution closely
    # (with independent draws the median of 64 lands anywhere in ~[780, 1280], 95% of seeds).
    n = args.num_seqs
    bins = [(i + rng.random()) / n for i in range(n)]
    span = args.prompt_max - args.prompt_min
    prompts = [args.prompt_min + min(span, int(q * (span + 1))) for q in bins]
    normal, mu = NormalDist(), math.log(args.resp_median)
    bins = [(i + rng.random()) / n for i in range(n)]
    responses = [min(args.resp_cap, max(args.resp_min, round(math.exp(mu + args.resp_sigma * normal.inv_cdf(q)))))
                 for q in bins]
    rng.shuffle(prompts)
    rng.shuffle(responses)
    advantages = [rng.gauss(0.0, 1.0) for _ in range(args.num_seqs)]
    rows = []
    for p, r in zip(prompts, responses):
        ids = [rng.randrange(args.vocab) for _ in range(p + r)]
        old = [args.old_logp_center + rng.gauss(0.0, args.old_logp_spread) for _ in range(r)]
        rows.append((ids, old))
    return prompts, responses, advantages, rows


def layout(prompts, responses, advantages, rows):
    """verl's padded [N, P + R] tensors as flat arrays (row-major)."""
    P, R = max(prompts), max(responses)
    S = P + R
    t = dict(input_ids=array.array("q"), attention_mask=array.array("q"), loss_mask=array.array("f"),
             old_log_probs=array.array("f"), advantages=array.array("f"))
    for p, r, adv, (ids, old) in zip(prompts, responses, advantages, rows):
        left, right = P - p, R - r
        t["input_ids"].extend([0] * left + ids + [0] * right)
        t["attention_mask"].extend([0] * left + [1] * (p + r) + [0] * right)
        t["loss_mask"].extend([0.0] * P + [1.0] * r + [0.0] * right)
        t["old_log_probs"].extend([0.0] * P + old + [0.0] * right)
        t["advantages"].extend([0.0] * P + [adv] * r + [0.0] * right)
    return t, (len(prompts), S), P, R


def write_safetensors(path, tensors, shape, metadata):
    """The safetensors format: u64 little-endian header length, a JSON header (dtype, shape, byte offsets per tensor,
    plus string metadata), then the raw little-endian bytes in header order."""
    names = {"q": "I64", "f": "F32"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, data in tensors.items():
        if sys.byteorder != "little":
            data = array.array(data.typecode, data)
            data.byteswap()
        raw = data.tobytes()
        header[name] = {"dtype": names[data.typecode], "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer pads it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the .safetensors file to write")
    ap.add_argument("--num-seqs", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=151936, help="token ids are drawn below this (Qwen2.5: 151936)")
    ap.add_argument("--prompt-min", type=int, default=128)
    ap.add_argument("--prompt-max", type=int, default=1024)
    ap.add_argument("--resp-median", type=float, default=1000.0)
    ap.add_argument("--resp-sigma", type=float, default=0.8, help="lognormal sigma of the response lengths")
    ap.add_argument("--resp-min", type=int, default=16)
    ap.add_argument("--resp-cap", type=int, default=3072)
    ap.add_argument("--old-logp-center", type=float, default=None, help="default: -ln(vocab)")
    ap.add_argument("--old-logp-spread", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not 1 <= args.prompt_min <= args.prompt_max or not 1 <= args.resp_min <= args.resp_cap or args.num_seqs < 1:
        ap.error("need 1 <= --prompt-min <= --prompt-max, 1 <= --resp-min <= --resp-cap and --num-seqs >= 1")
    if args.old_logp_center is None:
        args.old_logp_center = -math.log(args.vocab)

    prompts, responses, advantages, rows = draw(args)
    tensors, shape, P, R = layout(prompts, responses, advantages, rows)
    valid = sum(prompts) + sum(responses)
    stats = dict(num_seqs=args.num_seqs, max_prompt=P, max_response=R, seq_len=shape[1], valid_tokens=valid,
                 padded_tokens=shape[0] * shape[1], response_tokens=sum(responses), seed=args.seed, vocab=args.vocab)
    metadata = {k: str(v) for k, v in stats.items()}
    metadata["generator"] = " ".join(sys.argv[1:])
    write_safetensors(args.out, tensors, shape, metadata)

    want = response_length_stats(args.resp_median, args.resp_sigma, args.resp_min, args.resp_cap)
    got = dict(median=percentile(responses, 0.5), mean=sum(responses) / len(responses),
               p90=percentile(responses, 0.9), at_cap=sum(r == args.resp_cap for r in responses) / len(responses))
    padded = stats["padded_tokens"]
    print(f"{args.out}: {args.num_seqs} sequences, [{shape[0]}, {shape[1]}] (prompt {P} + response {R}), "
          f"valid {valid} of {padded} tokens ({100 * (1 - valid / padded):.0f}% padding)")
    for name, d in (("distribution", want), ("sample", got)):
        print(f"  response lengths, {name:12s}: median {d['median']:.0f}, mean {d['mean']:.0f}, p90 {d['p90']:.0f}, "
              f"{100 * d['at_cap']:.0f}% at the cap {args.resp_cap}")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
