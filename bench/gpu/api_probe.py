#!/usr/bin/env python3
"""What the GPU machine's PyTorch offers the engine (issue 8): op schemas the C++ side calls through ATen, and
timings of the candidate fused paths at the Qwen2.5-1.5B step's shapes (seq 4096, micro-batch 2)."""
import time

import torch
import torch.nn.functional as F


def schema(name):
    try:
        return [str(s) for s in torch._C._jit_get_schemas_for_operator(name)]
    except Exception as e:  # noqa: BLE001
        return [f"error {e}"]


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3


def main():
    print("torch", torch.__version__)
    for op in ["aten::rms_norm", "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward", "aten::_fused_adamw_",
               "aten::_foreach_lerp_", "aten::scaled_dot_product_attention", "aten::_grouped_mm", "aten::silu_backward",
               "aten::_cudnn_attention_forward", "aten::mm", "aten::addmm", "aten::_foreach_norm"]:
        for s in schema(op):
            print(" ", s)
    dev = "cuda"
    n, h = 8192, 1536
    x = torch.randn(n, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(n, h, device=dev, dtype=torch.bfloat16)

    def hf():
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        (w * y.to(x.dtype)).backward(g)

    def fused():
        F.rms_norm(x, (h,), w, 1e-6).backward(g)

    print(f"rmsnorm fwd+bwd [8192x1536] bf16: hf {bench(hf):.3f} ms, F.rms_norm {bench(fused):.3f} ms")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        print("F.rms_norm under autocast -> dtype", F.rms_norm(x, (h,), w, 1e-6).dtype)
    ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    print("rms_norm max rel err vs fp32:", ((F.rms_norm(x, (h,), w, 1e-6).float() - ref).abs().max() /
                                           ref.abs().max()).item())

    q = torch.randn(2, 12, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 2, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn(2, 12, 4096, 128, device=dev, dtype=torch.bfloat16)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def att(gqa):
        if gqa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            kk = k.repeat_interleave(6, 1)
            vv = v.repeat_interleave(6, 1)
            o = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        o.backward(go)

    print(f"sdpa fwd+bwd default: expand {bench(lambda: att(False)):.3f} ms, enable_gqa {bench(lambda: att(True)):.3f} ms")
    for b in [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]:
        for gqa in (False, True):
            try:
                with sdpa_kernel([b]):
                    print(f"  {b} gqa={gqa}: {bench(lambda: att(gqa)):.3f} ms")
            except Exception as e:  # noqa: BLE001
                print(f"  {b} gqa={gqa}: {str(e)[:100]}")

    # Chunked linear + log-prob: forward (matmul, logsumexp) + backward (recompute, softmax, two matmuls, fp32 grad_w).
    V = 151936
    hid = torch.randn(8190, h, device=dev, dtype=torch.bfloat16)
    W = torch.randn(V, h, device=dev, dtype=torch.bfloat16) * 0.02
    tgt = torch.randint(0, V, (8190,), device=dev)

    def chunked(rows):
        gw = torch.zeros(V, h, device=dev, dtype=torch.float32)
        for s in range(0, 8190, rows):
            hh = hid[s:s + rows]
            z = hh @ W.t()
            lse = torch.logsumexp(z.float(), -1)
            p = torch.softmax(z, -1, dtype=torch.float32)
            p.mul_(-1.0)
            p.scatter_add_(1, tgt[s:s + rows, None], torch.ones(hh.shape[0], 1, device=dev))
            pc = p.to(torch.bfloat16)
            _ = pc @ W
            gw.add_((pc.t() @ hh).float())
        return gw

    for rows in [110, 512, 1024, 2048, 4096]:
        torch.cuda.reset_peak_memory_stats()
        t = bench(lambda: chunked(rows), reps=3)
        print(f"lm head chunk {rows} rows: {t:.2f} ms, peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    # fused AdamW over 1.5B fp32 in 30 tensors vs foreach
    shapes = [233_000_000] + [46_800_000] * 28
    ps = [torch.randn(s, device=dev) for s in shapes]
    gs = [torch.randn(s, device=dev) for s in shapes]
    m = [torch.zeros(s, device=dev) for s in shapes]
    v2 = [torch.zeros(s, device=dev) for s in shapes]
    steps = [torch.zeros((), device=dev) for _ in shapes]
    inf = torch.zeros(1, device=dev)

    def fused_adam():
        torch._foreach_add_(steps, 1)
        torch._fused_adamw_(ps, gs, m, v2, [], steps, lr=1e-5, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False, grad_scale=None, found_inf=inf)

    print(f"_fused_adamw_ 1.5B fp32: {bench(fused_adam, reps=5):.2f} ms")


if __name__ == "__main__":
    main()
