"""How ``loader_state_v1.pt`` was made: run with the siftcli of commit 13a5855 (the last to save layout version 1),
``python tests/data/make_loader_state_v1.py tests/data/loader_state_v1.pt``. Two loaders (the GPU's decision order with
a raw batch waiting for its scores; the CPU's with memory scoring), each saved four batches into its second epoch, with
the batches it went on to yield to the end of its third. ``tests/test_loader.py`` loads the states into this version's
loader and checks that it yields the same batches."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss
from siftcli.sift import loader as loader_module


def make(overlap: bool) -> SiftingDataLoader:
    loader_module.OVERLAP_DEVICES = ("cuda", "cpu") if overlap else ("cuda",)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 4, generator=g)
    y = (x[:, 0] > 0).long()
    model = torch.nn.Linear(4, 2)
    model.load_state_dict({"weight": torch.eye(2, 4), "bias": torch.zeros(2)})
    config = SiftConfig(beta=1.0, loss_history_length=24, sift_delay=2, seed=4, scoring="fresh" if overlap else "memory")
    return SiftingDataLoader(DataLoader(TensorDataset(x, y), batch_size=8), model, cross_entropy_loss, config, batch_size=5,
                             exact_len=False)  # the default when this state was saved


def main(path: str) -> None:
    out = {}
    for overlap in (True, False):
        loader = make(overlap)
        for b in loader:  # epoch 0 in full, losses recorded
            loader.training_loss(cross_entropy_loss(loader.model, b))
        it = iter(loader)
        for _ in range(4):
            loader.training_loss(cross_entropy_loss(loader.model, next(it)))
        state = loader.state_dict()
        rest = []
        for source in (it, loader):  # the rest of epoch 1, then epoch 2
            for b in source:
                loader.training_loss(cross_entropy_loss(loader.model, b))
                rest.append(b[0].clone())
        out["gpu" if overlap else "cpu"] = {"state": state, "rest": rest, "kept": loader.stats.kept_samples}
    torch.save(out, path)


if __name__ == "__main__":
    main(sys.argv[1])
