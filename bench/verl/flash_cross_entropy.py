"""verl's log-probs through a fused cross-entropy, as its GPU users get them, on a machine where flash-attn cannot be
installed.

verl's `logprobs_from_logits` (verl/utils/torch_functional.py) uses flash-attn's Triton cross-entropy
(`flash_attn.ops.triton.cross_entropy.cross_entropy_loss`) when flash-attn is importable: a pass over the [tokens,
vocab] logits forward and one backward, written into the logits' own memory. Without flash-attn verl falls back to a
loop over the tokens, one log-softmax each: on 2026-12-08 (H100, 3B, a PPO batch of 84k tokens) 84k kernels forward
and 84k backward, 62% of verl's GPU time and most of its idle time, a path no GPU user of verl with flash-attn runs.
register() gives verl a stand-in with flash-attn's signature and meaning: per row, loss = logsumexp(logits) -
logits[label] in fp32 (0 where label == ignore_index), gradient (softmax - one-hot) x the loss's gradient, written
into the logits under inplace_backward (verl asks for it unless it also computes entropy, as with flash-attn). It
works over row chunks so its fp32 temporaries stay small, and on the GPU each chunk's math is torch.compile'd into
fused kernels (verl's engine here runs with use_torch_compile, so inductor is already in use)."""
import torch

CHUNK_ROWS = 2048  # fp32 temporaries of CHUNK_ROWS x vocab: 1.2 GiB at Qwen2.5's 152k vocabulary


def _row_logsumexp(x):
    return torch.logsumexp(x.float(), dim=-1)


def _row_grad(x, lse, labels, grad_loss):
    """d loss / d x of one chunk, in x's dtype: (softmax(x) - one-hot(labels)) * grad_loss per row."""
    p = torch.exp(x.float() - lse.unsqueeze(1))
    hot = torch.arange(x.shape[1], device=x.device).unsqueeze(0) == labels.unsqueeze(1)
    return ((p - hot.float()) * grad_loss.unsqueeze(1)).to(x.dtype)


_compiled = {}


def _compile(fn):
    """fn as fused kernels (whole graph, any row count), compiled once."""
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn, dynamic=True, fullgraph=True)
    return _compiled[fn]


def _kernel(fn, on_cuda):
    return _compile(fn) if on_cuda else fn


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, ignore_index, inplace_backward):
        lse_of = _kernel(_row_logsumexp, logits.is_cuda)
        lse = torch.cat([lse_of(logits[i:i + CHUNK_ROWS]) for i in range(0, logits.shape[0], CHUNK_ROWS)])
        valid = labels != ignore_index
        safe = labels.masked_fill(~valid, 0)
        picked = logits.gather(1, safe.unsqueeze(1)).squeeze(1).float()
        ctx.save_for_backward(logits, lse, safe, valid)
        ctx.inplace_backward = inplace_backward
        return torch.where(valid, lse - picked, torch.zeros_like(lse))

    @staticmethod
    def backward(ctx, grad_losses):
        logits, lse, safe, valid = ctx.saved_tensors
        grad_of = _kernel(_row_grad, logits.is_cuda)
        g = torch.where(valid, grad_losses.float(), torch.zeros_like(lse))
        out = logits if ctx.inplace_backward else torch.empty_like(logits)
        for i in range(0, logits.shape[0], CHUNK_ROWS):
            rows = slice(i, i + CHUNK_ROWS)
            out[rows].copy_(grad_of(logits[rows], lse[rows], safe[rows], g[rows]))
        return out, None, None, None


def cross_entropy_loss(logits, labels, label_smoothing=0.0, logit_scale=1.0, lse_square_scale=0.0,
                       ignore_index=-100, inplace_backward=False, process_group=None):
    """flash-attn's call: logits [rows, vocab], labels [rows] -> (losses fp32 [rows], z_losses fp32 [rows]). Only
    what verl uses is implemented; the rest is refused by name."""
    if label_smoothing != 0.0 or logit_scale != 1.0 or lse_square_scale != 0.0 or process_group is not None:
        raise NotImplementedError("flash_cross_entropy stands in for verl's call only: label_smoothing 0, "
                                  "logit_scale 1, lse_square_scale 0, no process_group")
    losses = _CrossEntropy.apply(logits, labels, ignore_index, inplace_backward)
    return losses, torch.zeros_like(losses)


def register():
    """verl's logprobs_from_logits takes the flash-attn path from now on (it reads these module globals per call)."""
    from verl.utils import torch_functional
    torch_functional.cross_entropy_loss = cross_entropy_loss
    torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE = True
