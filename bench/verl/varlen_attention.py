"""verl's engine with the varlen flash attention its users run, on a machine where flash-attn cannot be installed.

verl's FSDP engine packs a micro-batch into one row (use_remove_padding) and relies on flash-attn's varlen kernel to
keep the sequences of that row apart. flash-attn has no wheel for the GPU machine; aten carries the same kernel
(`aten._flash_attention_forward` over cumulative sequence lengths, with its backward). Registered here as a
transformers attention function under NAME and chosen through `HFModelConfig.override_config.attn_implementation`,
it stands in for flash-attn: each packed sequence attends causally to itself alone, as with flash_attention_2.
With `sdpa` instead, transformers would build a dense block-diagonal mask over the whole packed row."""
import torch

NAME = "aten_varlen"  # no "flash" in it: transformers would look for a flash-attn package under such a name

# One packed row's boundaries, kept for the layers after the first: every layer of one forward (and its recompute
# under activation checkpointing) gets the same position_ids tensor, and reading the boundaries costs a device sync.
# The tensor itself is the key: holding it keeps its memory from going to the next micro-batch's position_ids.
_last = {"position_ids": None, "value": None}


def _boundaries(position_ids):
    """Cumulative sequence lengths (int32) and the longest sequence of a packed row: a sequence starts wherever the
    position does not follow the one before it (transformers' rule for packed rows, find_packed_sequence_indices)."""
    if _last["position_ids"] is position_ids:
        return _last["value"]
    pos = position_ids.reshape(-1)
    starts = torch.ones_like(pos, dtype=torch.bool)
    starts[1:] = pos[1:] != pos[:-1] + 1
    first = torch.nonzero(starts).flatten()
    cu = torch.cat([first, first.new_tensor([pos.numel()])]).to(torch.int32)
    value = (cu, int((cu[1:] - cu[:-1]).max()))
    _last.update(position_ids=position_ids, value=value)
    return value


def varlen_flash_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           position_ids=None, **kwargs):
    """transformers' attention-function signature: query (1, heads, tokens, dim), key/value (1, kv heads, tokens,
    dim) of one packed row; returns (1, tokens, heads, dim) and no weights. Grouped kv heads go to the kernel as
    they are (it shares each kv head among its query heads)."""
    if query.shape[0] != 1 or position_ids is None:
        raise ValueError(f"{NAME} takes one packed row with its position_ids (got batch {query.shape[0]}, "
                         f"position_ids {'absent' if position_ids is None else 'given'}): use_remove_padding=True")
    cu, longest = _boundaries(position_ids)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, longest, longest, dropout, True, False,
                                                  scale=scaling)[0]
    return out.unsqueeze(0), None


def register():
    """Makes NAME a transformers attention implementation; its mask function builds no mask (the kernel needs none)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(NAME, varlen_flash_attention)
    AttentionMaskInterface.register(NAME, lambda *args, **kwargs: None)
