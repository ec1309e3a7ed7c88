"""verl's batch as the engine's packed batch, by views (docs/ARCHITECTURE.md, "The contract"; host_api/batch.h's
[Note: packed batch]).

verl's no-padding layout is the contract's packed batch: input_ids and position_ids are jagged nested tensors whose
values() hold the sequences back to back and whose offsets() are the cu_seqlens; loss_mask is either jagged like
input_ids (SFT: 1 at each target token, the contract's per-token mask) or verl's response mask padded to the
response width (PPO: one row per sequence, whose ones the engine counts as verl's engine counts them). The engine
gets views of those tensors; its outputs, in verl's alignment already (log_probs[t] for token t + 1), come back as
nested views on verl's offsets. A padded input_ids with its attention_mask goes to the engine as the host's padded
form, whose outputs are for token t itself: they are shifted here.

Checked here is what only verl's layout can get wrong, before any work: ids that are not integers (a cast would
truncate or wrap them), jagged entries whose rows are not input_ids' rows, response entries not as wide as the
response mask (or, jagged, not as long as the responses), tensors on the meta device, an empty row. The packed
batch's values (ids in the vocabulary, 0/1 masks, a target per call) are the host loop's (engine_driver/batch_check.h).
"""
import torch

SHIFTED_OUTPUTS = ("log_probs", "entropy")  # the padded form's position t is verl's t - 1
ID_DTYPES = (torch.int64, torch.int32)
# verl's per-response-token entries, read by its losses beside loss_mask (verl.workers.utils.losses): padded like
# the response mask [rows, response width], or jagged with one entry per response token.
RESPONSE_FIELDS = ("response_mask", "old_log_probs", "ref_log_prob", "advantages", "returns", "values",
                   "rollout_log_probs", "rollout_is_weights")
_FORMS = "a jagged nested tensor (verl's no-padding layout) or a padded tensor"


class LayoutError(ValueError):
    """A batch entry that cannot be read as verl's layout; the adapter raises it as EngineryError."""

    def __init__(self, what, allowed):
        super().__init__(f"{what} (allowed: {allowed})")
        self.what = what
        self.allowed = allowed


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


def jagged(value, key, ids=False):
    """verl's jagged entry (a jagged nested tensor whose values() are its rows back to back); None for a plain
    tensor. `ids`: refuses values that are not integer ids, one per token."""
    if not isinstance(value, torch.Tensor):
        raise LayoutError(f"batch['{key}'] is a {type(value).__name__}", _FORMS)
    if not value.is_nested:
        return None
    if value.layout != torch.jagged or value._lengths is not None or value._ragged_idx != 1:
        raise LayoutError(f"batch['{key}'] is a nested tensor whose values() are not its rows back to back", _FORMS)
    if ids and value.dtype not in ID_DTYPES:
        raise LayoutError(f"batch['{key}'] row 0 has dtype {value.dtype}", "torch.int64, torch.int32")
    if ids and value.dim() != 2:
        raise LayoutError(f"batch['{key}'] has rows of {value.dim() - 1} dimensions",
                          "one id per token (3-D multimodal position ids are not supported)")
    return value


def same_rows(checks, value, key, want, aligned_with):
    """Queues the refusal of jagged `value` unless its row lengths are `want` (those of `aligned_with`)."""
    got = value.offsets().diff().to(want.device)
    if got.shape != want.shape:
        raise LayoutError(f"batch['{key}'] has {got.shape[0]} rows, {aligned_with} {want.shape[0]}",
                          f"one row per row of {aligned_with}")

    def refusal():
        row = int((got != want).nonzero()[0, 0])
        return LayoutError(f"batch['{key}'] row {row} has {int(got[row])} entries, {aligned_with} {int(want[row])}",
                           f"one entry per token of {aligned_with}")
    checks.append(((got != want).any(), refusal))


def response_lengths(data, rows, width):
    """Valid response tokens per row: from `responses` (jagged) or the last `width` columns of a padded
    `attention_mask` (verl keeps both in its no-padding batch)."""
    responses = get(data, "responses")
    if isinstance(responses, torch.Tensor) and responses.is_nested:
        return responses.offsets().diff()
    mask = get(data, "attention_mask")
    if isinstance(mask, torch.Tensor) and not mask.is_nested and mask.dim() == 2 and mask.shape[0] == rows:
        return mask[:, -width:].sum(dim=1)
    raise LayoutError("a response entry is jagged, but neither 'responses' (jagged) nor a padded 'attention_mask' "
                      "says how long each response is", "one of them in the batch")


def to_engine_batch(data):
    """verl's batch -> (the engine's tensors, the Shape its outputs go back in)."""
    input_ids, loss_mask = get(data, "input_ids"), get(data, "loss_mask")
    if input_ids is None or loss_mask is None:
        raise LayoutError(f"the batch has no '{'input_ids' if input_ids is None else 'loss_mask'}'",
                          "input_ids and loss_mask (verl's response mask or a mask jagged like input_ids)")
    for key in list(data.keys()):
        value = get(data, key)
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            raise LayoutError(f"batch['{key}'] is on the meta device", "tensors holding values (cpu, cuda)")
    ids = jagged(input_ids, "input_ids", ids=True)
    if ids is None:
        return padded_batch(data, input_ids, loss_mask), Shape(None, input_ids.shape[0])
    offsets, lengths = ids.offsets(), ids.offsets().diff()
    checks = [((lengths < 1).any(), lambda: LayoutError(
        f"batch['input_ids'] row {int((lengths < 1).nonzero()[0, 0])} has shape [0]", "one or more ids per row"))]
    batch = {"input_ids": ids.values().long(), "cu_seqlens": offsets.long()}  # views unless int32
    position_ids = get(data, "position_ids")
    if position_ids is not None:
        positions = jagged(position_ids, "position_ids", ids=True)
        if positions is None:
            raise LayoutError("batch['position_ids'] is not jagged like input_ids", "one id per token, jagged")
        same_rows(checks, positions, "position_ids", lengths, "input_ids")
        batch["position_ids"] = positions.values().long()
    mask = jagged(loss_mask, "loss_mask")
    if mask is not None:  # aligned with input_ids (verl's SFT layout): per token
        same_rows(checks, mask, "loss_mask", lengths, "input_ids")
        batch["loss_mask"] = mask.values()
    elif loss_mask.dim() != 2 or loss_mask.shape[0] != lengths.shape[0]:
        raise LayoutError(f"batch['loss_mask'] has shape {list(loss_mask.shape)} for {lengths.shape[0]} rows",
                          "verl's response mask [rows, response width] or a mask jagged like input_ids")
    else:  # verl's response mask: per sequence
        batch["loss_mask"] = loss_mask
    responses = None
    for key in RESPONSE_FIELDS:
        value = get(data, key)
        entry = None if value is None else jagged(value, key)
        if entry is not None and mask is not None:
            same_rows(checks, entry, key, lengths, "input_ids")
        elif entry is not None:
            if responses is None:
                responses = response_lengths(data, lengths.shape[0], loss_mask.shape[1])
            same_rows(checks, entry, key, responses, "the responses")
        elif value is not None and mask is None and value.shape != loss_mask.shape:
            raise LayoutError(f"batch['{key}'] has shape {list(value.shape)}, loss_mask {list(loss_mask.shape)}",
                              "one entry per response token, as loss_mask")
    verdicts = torch.stack([bad.to(offsets.device) for bad, _ in checks]).tolist()  # one read from the device
    refused = next((refusal for verdict, (_, refusal) in zip(verdicts, checks) if verdict), None)
    if refused is not None:
        raise refused()
    return batch, Shape(offsets, lengths.shape[0])


def padded_batch(data, input_ids, loss_mask):
    """The host's padded form: verl's own tensors, loss_mask aligned with input_ids."""
    attention_mask = get(data, "attention_mask")
    for key, value in (("attention_mask", attention_mask), ("loss_mask", loss_mask)):
        if not isinstance(value, torch.Tensor) or value.shape != input_ids.shape:
            raise LayoutError(f"batch['input_ids'] is padded and batch['{key}'] is missing or of another shape",
                              f"a {key} of input_ids' shape")
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "loss_mask": loss_mask}
    if get(data, "position_ids") is not None:
        batch["position_ids"] = get(data, "position_ids")
    return batch


class Shape:
    """How the caller's batch was laid out: `offsets` verl's (None: padded), `rows` its sequences."""

    def __init__(self, offsets, rows):
        self.offsets, self.rows = offsets, rows

    def output(self, value, name, offsets=None):
        """An engine output in verl's layout, the autograd graph kept: a packed one as a nested view on `offsets`
        (a micro-batch's; the call's come nested already), a padded one shifted to verl's alignment."""
        if self.offsets is None:
            shift = name in SHIFTED_OUTPUTS
            return torch.cat([value[:, 1:], torch.zeros_like(value[:, :1])], dim=1) if shift else value
        if value.is_nested:
            return value
        return torch.nested.nested_tensor_from_jagged(value, offsets.to(value.device, non_blocking=True))


def select_rows(data, indices, batch_size):
    """The rows `indices` of a dict batch (a TensorDict is cut by verl's own index_select): nested entries and
    tensors with the batch's first dimension are indexed, everything else (metadata) is shared."""
    out = {}
    for key in list(data.keys()):
        value = get(data, key)
        if isinstance(value, torch.Tensor) and value.is_nested:
            rows = value.unbind()
            out[key] = torch.nested.as_nested_tensor([rows[i] for i in indices], layout=torch.jagged)
        elif isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch_size:
            out[key] = value.index_select(0, torch.tensor(indices, dtype=torch.long, device=value.device))
        else:
            out[key] = value
    return out
