"""verl's batches built as verl builds them, for tests and benchmarks (bench/verl/): from token lists to the
TensorDict verl's workers hand an engine's train_batch / infer_batch, with the non-tensor entries they set."""
import torch


def ppo_batch(prompts, responses, old_log_probs, advantages, micro_batch):
    """verl's PPO actor batch: left-padded prompts and right-padded responses in a DataProto -> to_tensordict ->
    left_right_2_no_padding. `old_log_probs`: one tensor per row over its response; `advantages`: one per row."""
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    rows, p_len, r_len = len(prompts), max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.zeros(rows, p_len, dtype=torch.long)
    response_ids = torch.zeros(rows, r_len, dtype=torch.long)
    attention = torch.zeros(rows, p_len + r_len, dtype=torch.long)
    response_mask = torch.zeros(rows, r_len)
    old = torch.zeros(rows, r_len)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_ids[i, p_len - len(p):] = torch.tensor(p)
        response_ids[i, :len(r)] = torch.tensor(r)
        attention[i, p_len - len(p): p_len + len(r)] = 1
        response_mask[i, :len(r)] = 1
        old[i, :len(r)] = old_log_probs[i]
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    batch = DataProto.from_dict(tensors={
        "prompts": prompt_ids, "responses": response_ids, "input_ids": torch.cat([prompt_ids, response_ids], -1),
        "attention_mask": attention, "position_ids": position_ids, "response_mask": response_mask,
        "old_log_probs": old, "advantages": torch.tensor(advantages).unsqueeze(-1) * response_mask})
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(data, temperature=1.0, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch,
                         calculate_entropy=False, global_batch_size=rows, pad_mode="no_padding")
    return data


def sft_batch(prompts, responses, micro_batch):
    """verl's SFT batch (its no-padding collator's layout): nested input_ids, position_ids and a loss mask aligned
    with input_ids, 1 on the response tokens."""
    from verl.utils import tensordict_utils as tu
    ids = [torch.tensor(p + r) for p, r in zip(prompts, responses)]
    masks = [torch.tensor([0.0] * len(p) + [1.0] * len(r)) for p, r in zip(prompts, responses)]
    nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
    return tu.get_tensordict({"input_ids": nested(ids), "position_ids": nested([torch.arange(len(t)) for t in ids]),
                              "loss_mask": nested(masks)},
                             {"temperature": 1.0, "use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro_batch,
                              "pad_mode": "no_padding", "calculate_entropy": False})
