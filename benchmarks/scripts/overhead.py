"""The sifting loader's own overhead: time per raw batch outside the scoring forward.

Iterates the same data three ways on a tiny model — the plain DataLoader, the sifting
loader, and the sifting loader's scoring forward alone — and reports, per raw batch,
(sifting loop − scoring − plain loop): the cost of ranking, drawing, slicing and packing.

    python -m benchmarks overhead [--batches 400] [--batch-size 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader

from siftcli.sift import SiftConfig, SiftingDataLoader, hf_loss


class Tiny(torch.nn.Module):
    def __init__(self, vocab: int = 1000) -> None:
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(vocab, 16, mode="sum")
        self.out = torch.nn.Linear(16, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        return {"logits": self.out(self.emb(input_ids, per_sample_weights=attention_mask.float()))}


def collate(rows: list) -> dict:
    width = max(len(r[0]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (toks, _) in enumerate(rows):
        ids[i, : len(toks)] = torch.tensor(toks)
        mask[i, : len(toks)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r[1] for r in rows])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    n = args.batches * args.batch_size
    lengths = torch.randint(4, 48, (n,), generator=g).tolist()
    rows = [(torch.randint(1, 1000, (ln,), generator=g).tolist(), i % 2) for i, ln in enumerate(lengths)]
    loader = DataLoader(rows, batch_size=args.batch_size, collate_fn=collate)
    model = Tiny()
    per_batch = {"plain": [], "sift": [], "scoring": [], "overhead": []}
    for mode in ("probabilistic", "calibrated"):
        per_batch = {"plain": [], "sift": [], "scoring": [], "overhead": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _batch in loader:
                pass
            plain = time.perf_counter() - t0
            sifting = SiftingDataLoader(loader, model, hf_loss, SiftConfig(beta=1.0, mode=mode))
            t0 = time.perf_counter()
            for _batch in sifting:
                pass
            total = time.perf_counter() - t0
            scoring = sifting.stats.scoring_seconds
            for key, value in (("plain", plain), ("sift", total), ("scoring", scoring), ("overhead", total - scoring - plain)):
                per_batch[key].append(1e6 * value / args.batches)
        med = {k: statistics.median(v) for k, v in per_batch.items()}
        print(f"{mode}: per raw batch of {args.batch_size} (median of {args.repeats}, 1 thread): plain loader {med['plain']:.0f} us, "
              f"sifting loader {med['sift']:.0f} us, of which scoring forward {med['scoring']:.0f} us; "
              f"wrapper overhead {med['overhead']:.0f} us")


if __name__ == "__main__":
    main()
