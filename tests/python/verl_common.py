"""verl's no-padding batch, built the way verl's left_right_2_no_padding lays it out (written from its documented
layout, not copied), and losses written as verl writes its own (token sums over batch_num_tokens, times dp_size)."""
import torch


def sequences(rows=4, prompt=(3, 5, 2, 4), response=(6, 3, 7, 5)):
    """Prompts and responses of different lengths (integer formula, as common.parity_batch)."""
    prompts = [(torch.arange(prompt[i]) * 5 + i * 11 + 2).remainder(256) for i in range(rows)]
    responses = [(torch.arange(response[i]) * 3 + i * 7 + 1).remainder(256) for i in range(rows)]
    return prompts, responses


def nested(rows):
    return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)


def verl_batch(prompts, responses, response_mask=None):
    """input_ids / position_ids / responses as jagged nested tensors (verl's no-padding layout), loss_mask the
    response mask padded to the longest response, attention_mask [rows, P + R] (prompt left-, response
    right-padded) as verl keeps it."""
    rows = len(prompts)
    width_p = max(p.shape[0] for p in prompts)
    width_r = max(r.shape[0] for r in responses)
    attention = torch.zeros(rows, width_p + width_r, dtype=torch.long)
    mask = torch.zeros(rows, width_r) if response_mask is None else response_mask
    for i, (p, r) in enumerate(zip(prompts, responses)):
        attention[i, width_p - p.shape[0]: width_p + r.shape[0]] = 1
        if response_mask is None:
            mask[i, : r.shape[0]] = 1.0
    ids = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
    pos = [torch.arange(t.shape[0]) for t in ids]
    data = {"input_ids": ids, "position_ids": pos, "responses": list(responses), "attention_mask": attention,
            "loss_mask": mask, "response_mask": mask, "temperature": 1.0, "calculate_entropy": False,
            "micro_batch_size_per_gpu": 2, "use_dynamic_bsz": False, "global_batch_size": rows}
    for key in ("input_ids", "position_ids", "responses"):
        data[key] = nested(data[key])
    return data


def plain_batch(prompts, responses):
    """The same sequences as the engine's own right-padded batch (batch.h): targets at the response tokens."""
    ids = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
    width = max(t.shape[0] for t in ids)
    batch = {"input_ids": torch.stack([torch.cat([t, t.new_zeros(width - t.shape[0])]) for t in ids]), "attention_mask": torch.zeros(len(ids), width, dtype=torch.long),
             "loss_mask": torch.zeros(len(ids), width)}
    for i, (p, t) in enumerate(zip(prompts, ids)):
        batch["attention_mask"][i, : t.shape[0]] = 1
        batch["loss_mask"][i, p.shape[0]: t.shape[0]] = 1.0
    return batch


def rows_of(value):
    return list(value.unbind()) if getattr(value, "is_nested", False) else list(value)


def response_part(per_token, data):
    """verl's slice of a per-token output to the response, [rows, R] zero-padded: the output at position t belongs
    to token t + 1, so response token j of a row of n tokens with r response tokens reads position n - r - 1 + j."""
    outs = rows_of(per_token)
    responses = rows_of(data["responses"])
    width = data["loss_mask"].shape[1]
    picked = []
    for out, resp in zip(outs, responses):
        n, r = out.shape[0], resp.shape[0]
        picked.append(torch.cat([out[n - r - 1: n - 1], out.new_zeros(width - r)]))
    return torch.stack(picked)


def sft_loss(model_output, data, dp_group=None):
    """verl's SFT token mean over the response: -sum(log p * mask) / batch_num_tokens * dp_size."""
    log_probs = response_part(model_output["log_probs"], data)
    mask = data["loss_mask"].to(log_probs.dtype)
    loss = -(log_probs * mask).sum() / data["batch_num_tokens"] * data["dp_size"]
    return loss, {"tokens": float(mask.sum())}


def pg_loss(model_output, data, dp_group=None):
    """A GRPO-style policy-gradient token mean (ratio to the old log-probs times the advantage), verl's scaling."""
    log_probs = response_part(model_output["log_probs"], data)
    mask = data["response_mask"].to(log_probs.dtype)
    ratio = torch.exp(log_probs - data["old_log_probs"])
    loss = -(data["advantages"] * ratio * mask).sum() / data["batch_num_tokens"] * data["dp_size"]
    return loss, {"ratio_mean": float((ratio * mask).sum() / mask.sum())}


_SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}


def read_safetensors_dir(directory):
    """{name: tensor} of every *.safetensors file in `directory` (the format: an 8-byte little-endian header
    length, a JSON header of dtype / shape / data_offsets, the data), without the safetensors package."""
    import json
    import os
    import struct
    tensors = {}
    for file in sorted(f for f in os.listdir(directory) if f.endswith(".safetensors")):
        with open(os.path.join(directory, file), "rb") as f:
            blob = f.read()
        (header_len,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8: 8 + header_len])
        base = 8 + header_len
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            raw = bytearray(blob[base + begin: base + end])
            flat = torch.frombuffer(raw, dtype=_SAFETENSORS_DTYPES[info["dtype"]]) if raw else torch.empty(0)
            tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors


def safetensors_names(directory):
    """The tensor names of a Hugging Face directory's *.safetensors files (headers only)."""
    import json
    import os
    import struct
    names = set()
    for file in sorted(f for f in os.listdir(directory) if f.endswith(".safetensors")):
        with open(os.path.join(directory, file), "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            names.update(k for k in json.loads(f.read(header_len)) if k != "__metadata__")
    return names
