"""verl's batch layout <-> the engine's padded batch (docs/ARCHITECTURE.md, "The contract" and "One step").

verl (its no-padding layout) hands an engine a dict-like batch whose input_ids / position_ids hold each sequence's
valid tokens only (jagged nested tensors), a loss_mask that is either the response mask padded to the response
length or a jagged mask aligned with input_ids (SFT), and metadata. Its engines answer with per-token outputs in
the same jagged layout, log_probs[t] being the log-probability of token t + 1 (the logits of position t).

The C++ engines take a right-padded [batch, seq] batch with attention_mask, and emit log_probs[b, t] for token t
itself (batch.h). This module converts between the two and needs no extension; a list of 1-D tensors (or a
strided nested tensor) is accepted wherever a jagged one is.

Checked here is what only verl's layout can get wrong, before any conversion: rows that are not integer ids (the
cast would truncate or wrap them), jagged entries whose rows are not as long as input_ids', response entries not
as wide as the response mask, tensors on the meta device, a batch without rows. The converted batch's values (ids
within the vocabulary, 0/1 masks, a target token per call) are the host loop's to check (engine_driver/batch_check.h).
"""
import torch

# Outputs whose position t describes token t + 1 in verl's layout (they come from the logits at t); values are
# per position in both layouts.
SHIFTED_OUTPUTS = ("log_probs", "entropy")
ROW_KEY = "_enginery_row"  # the batch row of each engine row, so a micro-batch finds its rows of verl's data


class LayoutError(ValueError):
    """A batch entry that cannot be read as verl's layout; the adapter raises it as EngineryError."""

    def __init__(self, what, allowed):
        super().__init__(f"{what} (allowed: {allowed})")
        self.what = what
        self.allowed = allowed


def has_jagged():
    """Whether this torch has jagged nested tensors (PyTorch 2.1+)."""
    return hasattr(torch, "jagged") and hasattr(torch.nested, "nested_tensor_from_jagged")


def get(data, key, default=None):
    """data[key] for a dict or a TensorDict; a TensorDict's non-tensor entry comes back as its Python value."""
    try:
        if key not in data.keys():
            return default
    except AttributeError:
        raise LayoutError(f"the batch is a {type(data).__name__}", "a dict or a TensorDict")
    value = data[key]
    if type(value).__name__ in ("NonTensorData", "NonTensorStack"):
        value = value.tolist() if type(value).__name__ == "NonTensorStack" else value.data
    return value


def is_sequence_list(value):
    return isinstance(value, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in value)


def rows_of(value, key):
    """The rows of a jagged entry (nested tensor or list of tensors) as a list of tensors; None for a plain one."""
    if isinstance(value, torch.Tensor) and getattr(value, "is_nested", False):
        return list(value.unbind())
    if is_sequence_list(value):
        return list(value)
    if isinstance(value, torch.Tensor):
        return None
    raise LayoutError(f"batch['{key}'] is a {type(value).__name__}",
                      "a nested tensor, a list of tensors, a padded tensor")


# Integer dtypes a token or position id may have: the rows are cast to int64, which would truncate a float id
# (12.7 -> 12) and wrap an unsigned one (2**64 - 1 -> -1).
ID_DTYPES = (torch.int64, torch.int32)

# verl's per-response-token entries, each read by its losses beside loss_mask (verl.workers.utils.losses):
# padded like the response mask [rows, response width], or jagged with one entry per response token.
RESPONSE_FIELDS = ("response_mask", "old_log_probs", "ref_log_prob", "advantages", "returns", "values",
                   "rollout_log_probs", "rollout_is_weights")


def check_ids(rows, key):
    """Refuses rows of `key` that are not integer ids, before they are cast."""
    bad = next((i for i, r in enumerate(rows) if r.dtype not in ID_DTYPES), None)
    if bad is not None:
        raise LayoutError(f"batch['{key}'] row {bad} has dtype {rows[bad].dtype}", "torch.int64, torch.int32")


def check_row_lengths(rows, lengths, key, aligned_with):
    """Refuses a jagged entry whose row lengths differ from `lengths` (those of `aligned_with`), naming the first."""
    if len(rows) != len(lengths):
        raise LayoutError(f"batch['{key}'] has {len(rows)} rows, {aligned_with} {len(lengths)}",
                          f"one row per row of {aligned_with}")
    got = [int(r.shape[0]) if r.dim() > 0 else 0 for r in rows]
    bad = next((i for i, (g, n) in enumerate(zip(got, lengths)) if g != n), None)
    if bad is not None:
        raise LayoutError(f"batch['{key}'] row {bad} has {got[bad]} entries, {aligned_with} {lengths[bad]}",
                          f"one entry per token of {aligned_with}")


def check_devices(data):
    """Refuses tensors on the meta device (no values: nothing can be computed from them), naming the entry."""
    for key in list(data.keys()):
        value = get(data, key)
        tensors = value if is_sequence_list(value) else [value] if isinstance(value, torch.Tensor) else []
        if any(t.device.type == "meta" for t in tensors):
            raise LayoutError(f"batch['{key}'] is on the meta device", "tensors holding values (cpu, cuda)")


def check_response_fields(data, lengths, loss_mask, mask_rows):
    """verl's per-token loss inputs as long as the tokens they describe: padded, the shape of a padded loss_mask;
    jagged, one entry per response token (padded loss_mask) or per token of input_ids (jagged loss_mask)."""
    responses = None
    for key in RESPONSE_FIELDS:
        value = get(data, key)
        if value is None or key == "loss_mask":
            continue
        rows = rows_of(value, key)
        if rows is None:
            if mask_rows is None and value.shape != loss_mask.shape:
                raise LayoutError(f"batch['{key}'] has shape {list(value.shape)}, loss_mask {list(loss_mask.shape)}",
                                  "one entry per response token, as loss_mask")
        elif mask_rows is not None:
            check_row_lengths(rows, lengths, key, "input_ids")
        else:
            if responses is None:
                responses = response_lengths(data, len(lengths), loss_mask.shape[1])
            check_row_lengths(rows, responses, key, "the responses")


def pad_rows(rows, length, fill=0):
    """Right-pads 1-D rows to [len(rows), length]."""
    out = rows[0].new_full((len(rows), length), fill)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def response_lengths(data, batch_size, response_width):
    """Valid response tokens per row, for placing a padded response mask: from `responses` (jagged) or from the
    last `response_width` columns of `attention_mask` (verl keeps both in its no-padding batch)."""
    responses = get(data, "responses")
    if responses is not None:
        rows = rows_of(responses, "responses")
        if rows is not None:
            return [int(r.shape[0]) for r in rows]
    mask = get(data, "attention_mask")
    if isinstance(mask, torch.Tensor) and not getattr(mask, "is_nested", False) and mask.dim() == 2:
        return [int(n) for n in mask[:, -response_width:].sum(dim=1).tolist()]
    raise LayoutError("batch['loss_mask'] is padded to the response length, but neither 'responses' (jagged) nor a "
                      "padded 'attention_mask' says where each response starts", "one of them in the batch")


def engine_loss_mask(data, loss_mask, lengths, width):
    """loss_mask in the engine's layout: 1 at each token that is a training target (batch.h)."""
    rows = rows_of(loss_mask, "loss_mask")
    if rows is not None:  # aligned with input_ids (verl's SFT layout): token t is a target where the mask says
        check_row_lengths(rows, lengths, "loss_mask", "input_ids")
        out = pad_rows([r.to(torch.float32) for r in rows], width, 0.0)
    else:  # the response mask [batch, response_width]: response token j of row b sits at n_b - r_b + j
        responses = response_lengths(data, len(lengths), loss_mask.shape[1])
        out = torch.zeros(len(lengths), width, dtype=torch.float32, device=loss_mask.device)
        for b, (n, r) in enumerate(zip(lengths, responses)):
            if r > n or r > loss_mask.shape[1]:
                raise LayoutError(f"row {b}: a response of {r} tokens in a sequence of {n} with loss_mask width "
                                  f"{loss_mask.shape[1]}", "a response no longer than its sequence and the mask")
            out[b, n - r : n] = loss_mask[b, :r].to(torch.float32)
    out[:, 0] = 0.0  # position 0 has no preceding token: never a target
    return out


def to_engine_batch(data, pad_token_id=0):
    """verl's batch -> (the engine's tensors, the layout to convert outputs back with).

    input_ids jagged (nested tensor or list): right-padded, attention_mask from the lengths, position_ids padded
    from the caller's (or left to the engine, which counts them from the mask). input_ids padded: used as they
    are with the caller's attention_mask."""
    input_ids = get(data, "input_ids")
    if input_ids is None:
        raise LayoutError("the batch has no 'input_ids'", "a nested tensor, a list of tensors, a padded tensor")
    loss_mask = get(data, "loss_mask")
    if loss_mask is None:
        raise LayoutError("the batch has no 'loss_mask'", "verl's response mask or a mask aligned with input_ids")
    check_devices(data)
    rows = rows_of(input_ids, "input_ids")
    if rows is None:
        return padded_batch(data, input_ids, loss_mask), Layout(None, input_ids)
    if not rows:
        raise LayoutError("batch['input_ids'] has no rows", "at least one sequence")
    check_ids(rows, "input_ids")
    lengths = [int(r.shape[0]) if r.dim() == 1 else 0 for r in rows]
    empty = next((i for i, n in enumerate(lengths) if n < 1), None)
    if empty is not None:
        shape = list(rows[empty].shape)
        raise LayoutError(f"batch['input_ids'] row {empty} has shape {shape}", "one or more token ids per row, 1-D")
    width = max(lengths)
    batch = {"input_ids": pad_rows([r.to(torch.long) for r in rows], width, pad_token_id)}
    batch["attention_mask"] = (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(torch.long)
    position_ids = get(data, "position_ids")
    if position_ids is not None:
        position_rows = rows_of(position_ids, "position_ids")
        if position_rows is None or any(p.dim() != 1 for p in position_rows):
            raise LayoutError("batch['position_ids'] is not jagged like input_ids",
                              "one id per token, jagged (3-D multimodal position ids are not supported)")
        check_ids(position_rows, "position_ids")
        check_row_lengths(position_rows, lengths, "position_ids", "input_ids")
        batch["position_ids"] = pad_rows([p.to(torch.long) for p in position_rows], width, 0)
    mask_rows = rows_of(loss_mask, "loss_mask")
    check_response_fields(data, lengths, loss_mask, mask_rows)
    batch["loss_mask"] = engine_loss_mask(data, loss_mask, lengths, width)
    batch = {k: v.to(rows[0].device) for k, v in batch.items()}
    batch[ROW_KEY] = torch.arange(len(rows), device=rows[0].device)
    return batch, Layout(lengths, input_ids)


def padded_batch(data, input_ids, loss_mask):
    """The left/right-padded layout: verl's own tensors, loss_mask aligned with input_ids."""
    attention_mask = get(data, "attention_mask")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        raise LayoutError("batch['input_ids'] is padded and batch['attention_mask'] is missing or of another shape",
                          "an attention_mask of input_ids' shape")
    if not isinstance(loss_mask, torch.Tensor) or loss_mask.shape != input_ids.shape:
        raise LayoutError("batch['input_ids'] is padded and batch['loss_mask'] is of another shape",
                          "a loss_mask of input_ids' shape")
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask.to(torch.float32)}
    position_ids = get(data, "position_ids")
    if position_ids is not None:
        batch["position_ids"] = position_ids
    batch[ROW_KEY] = torch.arange(input_ids.shape[0], device=input_ids.device)
    return batch


class Layout:
    """How the caller's batch was laid out, to hand outputs back the same way."""

    def __init__(self, lengths, input_ids):
        self.lengths = lengths  # None: padded
        self.nested = isinstance(input_ids, torch.Tensor) and getattr(input_ids, "is_nested", False)
        self.jagged = self.nested and has_jagged() and getattr(input_ids, "layout", None) == torch.jagged

    def subset(self, indices):
        """The layout of some of the rows (a micro-batch)."""
        sub = Layout.__new__(Layout)
        sub.nested, sub.jagged = self.nested, self.jagged
        sub.lengths = None if self.lengths is None else [self.lengths[i] for i in indices]
        return sub

    def output(self, name, padded):
        """An engine output [rows, seq] in the caller's layout (keeps the autograd graph)."""
        shifted = name in SHIFTED_OUTPUTS  # verl's position t holds the engine's t + 1; the last one has none
        if self.lengths is None:
            return torch.cat([padded[:, 1:], torch.zeros_like(padded[:, :1])], dim=1) if shifted else padded
        zero = padded.new_zeros(1)
        rows = [torch.cat([padded[i, 1:n], zero]) if shifted else padded[i, :n] for i, n in enumerate(self.lengths)]
        if self.jagged:
            offsets = torch.tensor([0] + self.lengths, device=padded.device).cumsum(0)
            return torch.nested.nested_tensor_from_jagged(torch.cat(rows), offsets)
        if self.nested:
            return torch.nested.as_nested_tensor(rows)
        return rows


def select_rows(data, indices, batch_size):
    """The rows `indices` of verl's batch as a plain dict: jagged entries keep their form, tensors with the batch's
    first dimension are indexed, everything else (metadata) is shared."""
    out = {}
    index = None
    for key in list(data.keys()):
        value = get(data, key)
        if isinstance(value, torch.Tensor) and getattr(value, "is_nested", False):
            picked = [value.unbind()[i] for i in indices] if len(indices) else []
            layout = torch.jagged if getattr(value, "layout", None) == getattr(torch, "jagged", None) else None
            out[key] = (torch.nested.as_nested_tensor(picked, layout=layout) if layout is not None
                        else torch.nested.as_nested_tensor(picked))
        elif is_sequence_list(value) and len(value) == batch_size:
            out[key] = [value[i] for i in indices]
        elif isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch_size:
            if index is None or index.device != value.device:
                index = torch.tensor(indices, dtype=torch.long, device=value.device)
            out[key] = value.index_select(0, index)
        else:
            out[key] = value
    return out
