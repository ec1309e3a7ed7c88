"""verl's shard and delta exports put back together as verl's delta checkpoint engine does
(verl/checkpoint_engine/delta_checkpoint_engine.py, whose module needs cupy, so its _GatherQueue dispatch is
restated here): a piece's positions come from verl's translate_flat_indices with the spec's place; entries without a
gather group are rank 0's alone; the others are gathered to rank 0 with verl's own gather_slot_entries_to_rank0.
Every function is collective over the ranks of the engine; results exist on rank 0 (None elsewhere)."""
import torch
import torch.distributed as dist


def _gather(pg, names, idx, val, counts):
    """{name: (positions, values)} on rank 0 for one group's entries, in order."""
    if pg is None:  # the consumer's rule: rank 0's local entries already are the whole tensors
        if dist.get_rank() != 0:
            return None
        out, at = {}, 0
        for name, c in zip(names, counts.tolist()):
            out[name] = (idx[at:at + c], val[at:at + c])
            at += c
        return out
    from verl.checkpoint_engine.delta_sync.sparse_gather import gather_slot_entries_to_rank0
    gathered = gather_slot_entries_to_rank0(idx, val, counts, group=pg)
    return None if gathered is None else dict(zip(names, gathered))


def gather_shards(export):
    """get_per_tensor_param_shard()'s (generator, peft) -> {name: full tensor} on rank 0, every element placed once
    (asserted). Non-contributing ranks (HSDP replicas) send nothing, as verl's hf_delta_export does."""
    from verl.workers.engine.spec import derive_dtensor_placement, translate_flat_indices
    generator, peft = export
    assert peft is None
    groups = {}  # id(pg) -> (pg, names, shapes, dtype, idx pieces, value pieces, counts)
    for name, local, spec in generator:
        if spec.place is not None:
            place, contributes, pg = spec.place, spec.contributes, spec.gather_group
        else:
            place, contributes, pg = derive_dtensor_placement(spec)
        if not contributes:
            local = local[:0]
        idx = translate_flat_indices(torch.arange(local.numel(), dtype=torch.int64), place)
        entry = groups.setdefault(id(pg), (pg, [], [], []))
        entry[1].append((name, tuple(spec.full_shape), local.dtype))
        entry[2].append(idx)
        entry[3].append(local.reshape(-1))
    full = {}
    for pg, named, idx, val in groups.values():
        counts = torch.tensor([i.numel() for i in idx], dtype=torch.int64)
        got = _gather(pg, [n for n, _, _ in named], torch.cat(idx), torch.cat(val), counts)
        if got is None or dist.get_rank() != 0:  # an HSDP replica group's rank 0 gets its own group's
            continue
        for name, shape, dtype in named:
            positions, values = got[name]
            numel = int(torch.tensor(shape).prod()) if shape else 1
            assert torch.equal(positions.sort().values, torch.arange(numel)), f"{name}: not every element once"
            tensor = torch.empty(numel, dtype=dtype)
            tensor[positions.long()] = values
            full[name] = tensor.view(shape)
    return full if dist.get_rank() == 0 else None


def apply_delta(export, weights):
    """get_per_tensor_param_delta_shard()'s (generator, peft) applied to `weights` ({name: full tensor}, changed in
    place on rank 0). Returns {name: sorted changed positions} on rank 0."""
    generator, peft = export
    assert peft is None
    groups = {}
    for slots, dtype_str, counts, hf_idx, hf_val, pg in generator:
        assert len(slots) == 1 and counts.numel() == 1  # identity parameters: the HF tensor is the one slot
        entry = groups.setdefault(id(pg), (pg, [], [], [], []))
        entry[1].append(slots[0][0])
        entry[2].append(counts)
        entry[3].append(hf_idx)
        entry[4].append(hf_val)
        assert hf_idx.dtype == torch.int32 and dtype_str == str(hf_val.dtype).replace("torch.", "")
    changed = {}
    for pg, names, counts, idx, val in groups.values():
        got = _gather(pg, names, torch.cat(idx), torch.cat(val), torch.cat(counts))
        if got is None or dist.get_rank() != 0:  # an HSDP replica group's rank 0 gets its own group's
            continue
        for name in names:
            positions, values = got[name]
            weights[name].view(-1)[positions.long()] = values
            changed[name] = positions.long().sort().values
    return changed if dist.get_rank() == 0 else None


def changed_positions(before, after):
    """The flat positions of two bf16 tensors whose bytes differ: what verl's byte diff (shard_delta_indices)
    reports."""
    return (before.reshape(-1).view(torch.int16) != after.reshape(-1).view(torch.int16)).nonzero().view(-1)
