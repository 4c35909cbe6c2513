"""Sample identity without user code: the loader knows which dataset rows each raw batch holds."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from siftcli.sift import SiftConfig, SiftingDataLoader
from siftcli.sift.indices import IndexTracker


class Rows(Dataset):
    """Row i holds the value i, so a batch says which indices it came from."""

    def __len__(self) -> int:
        return 50

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor([float(i), 0.0]), torch.tensor(i % 2)


def _loss(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="none")


@pytest.mark.parametrize("workers", [0, 2])
def test_indices_match_the_rows_of_every_raw_batch_with_shuffling_and_workers(workers: int) -> None:
    data = DataLoader(Rows(), batch_size=8, shuffle=True, num_workers=workers)
    loader = SiftingDataLoader(data, torch.nn.Linear(2, 2), _loss, SiftConfig(beta=1.0, seed=0))
    seen: list[tuple[list[int], list[int]]] = []
    loader.add_batch_hook(lambda d: seen.append((d.indices.tolist(), d.raw[0][:, 0].long().tolist())))
    for _ in range(2):  # two epochs, two different shuffles
        list(loader)
    assert len(seen) == 14 and all(idx == rows for idx, rows in seen)
    assert sorted(i for idx, _ in seen[:7] for i in idx) == list(range(50))
    assert [idx for idx, _ in seen[:7]] != [idx for idx, _ in seen[7:]]


def test_indices_stay_aligned_after_an_early_stop_and_a_resume() -> None:
    data = DataLoader(Rows(), batch_size=5, shuffle=False)
    first = SiftingDataLoader(data, torch.nn.Linear(2, 2), _loss, SiftConfig(beta=1.0, seed=0), batch_size=5)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    data2 = DataLoader(Rows(), batch_size=5, shuffle=False)
    resumed = SiftingDataLoader(data2, torch.nn.Linear(2, 2), _loss, SiftConfig(beta=1.0, seed=0), batch_size=5)
    resumed.load_state_dict(state)
    seen: list[bool] = []
    resumed.add_batch_hook(lambda d: seen.append(d.indices.tolist() == d.raw[0][:, 0].long().tolist()))
    list(resumed)
    assert seen and all(seen)


def test_no_indices_where_the_loader_cannot_tell() -> None:
    class Stream(IterableDataset):
        def __iter__(self):  # noqa: ANN204
            return iter(range(10))

    assert not IndexTracker([[1, 2], [3]]).available
    assert not IndexTracker(DataLoader(Stream(), batch_size=2)).available
    assert not IndexTracker(DataLoader(Rows(), batch_size=None)).available
    tracker = IndexTracker(DataLoader(Rows(), batch_size=4))
    assert tracker.available and tracker.next() is None  # nothing drawn yet
