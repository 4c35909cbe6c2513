"""Batches: sizing, selecting, re-padding, trimming and the packer that fills full batches."""

from __future__ import annotations

import torch

from siftcli.sift import batching


def test_concat_pads_labels_with_minus_100_and_handles_batchencoding() -> None:
    from transformers import BatchEncoding

    a = BatchEncoding({"input_ids": torch.ones(2, 3, dtype=torch.long), "labels": torch.ones(2, 3, dtype=torch.long)})
    b = BatchEncoding({"input_ids": torch.ones(1, 5, dtype=torch.long), "labels": torch.ones(1, 5, dtype=torch.long)})
    joined = batching.concat([a, b], {"input_ids": 9, "labels": -100})
    assert isinstance(joined, BatchEncoding)
    assert joined["input_ids"][0].tolist() == [1, 1, 1, 9, 9]
    assert joined["labels"][1].tolist() == [1, 1, 1, -100, -100]
    left = batching.concat([a, b], {"input_ids": 9}, padding_side="left")
    assert left["input_ids"][0].tolist() == [9, 9, 1, 1, 1]


def test_packed_batches_carry_no_padding_column_nobody_needs() -> None:
    short = {"input_ids": torch.tensor([[5, 6, 0, 0, 0, 0]] * 4), "attention_mask": torch.tensor([[1, 1, 0, 0, 0, 0]] * 4),
             "labels": torch.tensor([0, 1, 0, 1])}
    long_ = {"input_ids": torch.tensor([[5, 6, 7, 8, 9, 9, 9, 9]] * 4), "attention_mask": torch.ones(4, 8, dtype=torch.long),
             "labels": torch.tensor([0, 1, 0, 1])}
    packed = batching.concat([batching.select(short, torch.tensor([0, 1])), batching.select(long_, torch.tensor([0]))])
    assert packed["input_ids"].shape == (3, 8)
    assert batching.trim_padding(batching.select(packed, torch.tensor([0, 1])))["input_ids"].shape == (2, 2)
    left = {"input_ids": torch.tensor([[0, 0, 0, 5], [0, 0, 6, 7]]), "attention_mask": torch.tensor([[0, 0, 0, 1], [0, 0, 1, 1]])}
    trimmed = batching.trim_padding(left, "left")
    assert trimmed["input_ids"].tolist() == [[0, 5], [6, 7]]


def _batch(n: int, width: int, start: int = 0) -> dict:
    return {"input_ids": torch.arange(start, start + n).repeat_interleave(width).view(n, width),
            "attention_mask": torch.ones(n, width, dtype=torch.long), "labels": torch.arange(start, start + n)}


def test_packer_fills_full_batches_in_order_and_keeps_the_rest() -> None:
    packer = batching.Packer(batch_size=4)
    assert packer.add(_batch(4, 3), torch.tensor([True, False, True, False])) == []
    out = packer.add(_batch(4, 5, start=10), torch.tensor([True, True, True, False]))
    assert len(out) == 1 and out[0]["labels"].tolist() == [0, 2, 10, 11]
    assert out[0]["input_ids"].shape == (4, 5) and out[0]["attention_mask"][0].tolist() == [1, 1, 1, 0, 0]
    assert packer.buffered == 1
    state = packer.state_dict()
    restored = batching.Packer(batch_size=4)
    restored.load_state_dict(state)
    rest = restored.drain(full_only=False)
    assert [b["labels"].tolist() for b in rest] == [[12]] and restored.buffered == 0
    assert rest[0]["input_ids"].shape == (1, 5)


def test_packer_fast_path_passes_a_fully_kept_batch_through() -> None:
    packer = batching.Packer(batch_size=4)
    raw = _batch(4, 3)
    assert packer.add(raw, torch.ones(4, dtype=torch.bool))[0] is raw
    assert packer.add(_batch(4, 3), torch.zeros(4, dtype=torch.bool)) == [] and packer.buffered == 0


def test_batch_size_select_and_split_walk_nested_structures() -> None:
    batch = ({"x": torch.arange(6).view(3, 2)}, ["a", "b", "c"])
    assert batching.batch_size(batch) == 3
    picked = batching.select(batch, torch.tensor([2, 0]))
    assert picked[0]["x"].tolist() == [[4, 5], [0, 1]] and picked[1] == ["c", "a"]
    head, tail = batching.split(batch, 2)
    assert batching.batch_size(head) == 2 and batching.batch_size(tail) == 1
    assert batching.split(batch, 5) == (batch, None)
