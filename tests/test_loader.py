"""The drop-in loader: batch formats, contract, statistics, resume, scoring hygiene."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss, hf_loss, mse_loss
from siftcli.sift import loader as loader_module


def _tuple_loader(n: int = 100, batch: int = 8, shuffle: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=shuffle)


def test_yields_full_batches_and_the_remainder() -> None:
    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig(beta=1.0, seed=0),
                               exact_len=False)  # each epoch yields what it kept (exact_len carries a surplus over)
    sizes = [b[0].shape[0] for b in loader]
    assert all(s == 8 for s in sizes[:-1]) and 0 < sizes[-1] <= 8
    assert sum(sizes) == loader.stats.kept_samples
    assert loader.stats.raw_samples == 100 and loader.stats.batches == len(sizes)
    assert 0.3 < loader.stats.kept_fraction < 0.7


def test_len_is_the_expected_number_of_batches_and_two_passes_are_two_epochs() -> None:
    loader = SiftingDataLoader(_tuple_loader(n=800), torch.nn.Linear(4, 2), cross_entropy_loss,
                               SiftConfig(beta=1.0, sift_delay=10, mode="calibrated"))
    expected_first = len(loader)
    first = sum(1 for _ in loader)
    expected_second = len(loader)
    second = sum(1 for _ in loader)
    assert abs(first - expected_first) <= 1 and abs(second - expected_second) <= 1
    assert expected_first == 10 + 45  # 10 delay batches, then half of 720 samples in batches of 8
    assert expected_second == 50
    assert [e.epoch for e in loader.stats.epochs] == [0, 1]


def test_dict_batches_padded_to_different_lengths_are_repadded() -> None:
    g = torch.Generator().manual_seed(0)

    def make(length: int, n: int = 4) -> dict:
        return {
            "input_ids": torch.randint(1, 50, (n, length), generator=g),
            "attention_mask": torch.ones(n, length, dtype=torch.long),
            "labels": torch.randint(0, 2, (n,), generator=g),
            "ids": [f"id{length}-{i}" for i in range(n)],
        }

    raw = [make(3), make(7), make(5), make(6)]

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(50, 2, mode="sum")

        def forward(self, input_ids, attention_mask):  # noqa: ANN001
            return {"logits": self.emb(input_ids)}

    loader = SiftingDataLoader(raw, Model(), hf_loss, SiftConfig(beta=1.0, loss_history_length=8),
                               batch_size=4, pad_values={"input_ids": 0}, exact_len=False)
    out = list(loader)
    total = sum(b["labels"].shape[0] for b in out)
    assert total == loader.stats.kept_samples
    for b in out:
        n, width = b["input_ids"].shape
        assert b["attention_mask"].shape == (n, width) and len(b["ids"]) == n
        lengths = [int(s.split("-")[0][2:]) for s in b["ids"]]
        for row, length in enumerate(lengths):  # padding after each sample's own length
            assert (b["input_ids"][row, length:] == 0).all() and (b["attention_mask"][row, length:] == 0).all()
            assert (b["attention_mask"][row, :length] == 1).all()


def test_list_batches_and_mse() -> None:
    x = torch.randn(40, 3)
    y = torch.randn(40, 1)
    raw = [[x[i:i + 10], y[i:i + 10]] for i in range(0, 40, 10)]
    loader = SiftingDataLoader(raw, torch.nn.Linear(3, 1), mse_loss, SiftConfig(beta=0.5), batch_size=10, exact_len=False)
    out = list(loader)
    assert all(isinstance(b, list) for b in out)
    assert sum(b[0].shape[0] for b in out) == loader.stats.kept_samples


def test_transform_hook_covers_custom_batches() -> None:
    class Custom:
        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y = x, y

    data = _tuple_loader()
    raw = [Custom(x, y) for x, y in data]
    loader = SiftingDataLoader(raw, torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig(), batch_size=8,
                               batch_transform=lambda c: (c.x, c.y))
    assert sum(b[0].shape[0] for b in loader) == loader.stats.kept_samples


def test_unknown_batch_type_gets_a_clear_error() -> None:
    loader = SiftingDataLoader([object()], torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig(), batch_size=8)
    with pytest.raises(TypeError, match="batch_transform"):
        list(loader)


def test_wrong_loss_shape_is_reported() -> None:
    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), lambda m, b: torch.zeros(3), SiftConfig())
    with pytest.raises(ValueError, match="3 losses for a batch of 8"):
        next(iter(loader))


MISUSE = [  # (argument changed, exception, words the message must hold: the argument and the fix)
    ({"dataloader": 42}, TypeError, "dataloader must be an iterable of batches"),
    ({"model": "bert"}, TypeError, "model must be the torch.nn.Module being trained, got str"),
    ({"loss_fn": None}, TypeError, "loss_fn must be a callable (model, batch) -> Tensor[batch]"),
    ({"config": {"beta": 2}}, TypeError, "config must be a SiftConfig, got dict: write SiftConfig(**settings)"),
    ({"batch_size": 0}, ValueError, "batch_size must be a positive whole number, got 0"),
    ({"batch_size": 2.5}, ValueError, "batch_size must be a positive whole number, got 2.5"),
    ({"model": torch.nn.Linear(4, 2, device="meta")}, ValueError, "model: its parameter weight is on the meta device"),
]


@pytest.mark.parametrize("change,error,words", MISUSE)
def test_a_misplaced_argument_is_named_with_its_fix_at_construction(change: dict, error: type, words: str) -> None:
    args = {"dataloader": _tuple_loader(), "model": torch.nn.Linear(4, 2), "loss_fn": cross_entropy_loss,
            "config": SiftConfig(), **change}
    with pytest.raises(error) as caught:
        SiftingDataLoader(**args)
    assert words in str(caught.value)


@pytest.mark.parametrize("loss", [lambda m, b: cross_entropy_loss(m, b).mean(), lambda m, b: cross_entropy_loss(m, b).tolist()])
def test_a_loss_that_is_not_per_sample_says_what_shape_it_must_have(loss) -> None:  # noqa: ANN001
    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), loss, SiftConfig())
    with pytest.raises((ValueError, TypeError), match=r"shape \[8\] \(reduction='none'|not a list"):
        next(iter(loader))
    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig())
    batch = next(iter(loader))
    with pytest.raises(ValueError, match=r"training_loss\(\)/record\(\) got 1 losses for a batch of 8.*shape \[8\]"):
        loader.training_loss(cross_entropy_loss(loader.model, batch).mean())


def test_decisions_come_from_the_seeded_generator_not_global_state() -> None:
    def masks(global_seed: int, sift_seed: int = 5) -> list[list[bool]]:
        model = torch.nn.Linear(4, 2).requires_grad_(False)
        model.load_state_dict({"weight": torch.ones(2, 4), "bias": torch.zeros(2)})
        loader = SiftingDataLoader(_tuple_loader(), model, cross_entropy_loss, SiftConfig(seed=sift_seed))
        seen: list[list[bool]] = []
        loader.add_batch_hook(lambda d: seen.append(d.mask.tolist()))
        torch.manual_seed(global_seed)  # right before the decisions: only the global state differs
        list(loader)
        return seen

    assert masks(1) == masks(2)  # global randomness does not reach the decisions
    assert masks(1) != masks(1, sift_seed=6)  # the config's seed does


@pytest.mark.parametrize("out_batch,stop", [(None, 4), (3, 5), (3, 6)])
def test_resume_mid_epoch_reproduces_an_uninterrupted_run(out_batch: int | None, stop: int) -> None:
    """Also with yielded batches smaller than raw ones, where one raw batch packs into several."""

    def make() -> SiftingDataLoader:
        model = torch.nn.Linear(4, 2)
        model.load_state_dict({"weight": torch.eye(2, 4), "bias": torch.zeros(2)})
        return SiftingDataLoader(_tuple_loader(n=200), model, cross_entropy_loss,
                                 SiftConfig(beta=1.0, loss_history_length=40, sift_delay=3, seed=11), batch_size=out_batch)

    full = make()
    reference = [b[0].clone() for _ in range(2) for b in full]

    first = make()
    got = [b[0].clone() for b in first]  # epoch 0 in full
    it = iter(first)
    for _ in range(stop):
        got.append(next(it)[0].clone())
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    got += [b[0].clone() for b in resumed]
    assert len(got) == len(reference)
    assert all(torch.equal(a, b) for a, b in zip(got, reference))
    assert resumed.stats.kept_samples == full.stats.kept_samples


def test_nan_losses_never_crash() -> None:
    def loss(m: torch.nn.Module, batch) -> torch.Tensor:
        out = cross_entropy_loss(m, batch)
        out[0] = float("nan")
        return out

    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), loss, SiftConfig())
    with pytest.warns(RuntimeWarning):
        list(loader)
    assert loader.stats.nonfinite == 13  # one per raw batch (13 batches of 100 samples)


def test_memory_mode_scores_only_unknown_or_stale_samples_and_record_feeds_it() -> None:
    def make(max_age: int | None) -> SiftingDataLoader:
        return SiftingDataLoader(_tuple_loader(n=96, batch=8), torch.nn.Linear(4, 2), cross_entropy_loss,
                                 SiftConfig(beta=1.0, scoring="memory", memory_max_age=max_age, seed=0), exact_len=False)

    forever = make(None)
    list(forever)
    assert forever.stats.scored_samples == 96 and forever.stats.memory_samples == 0
    list(forever)
    assert forever.stats.scored_samples == 96 and forever.stats.memory_samples == 96  # epoch 2 from memory

    strict = make(0)  # a loss from the previous epoch is already too old
    for _ in range(2):
        list(strict)
    assert strict.stats.scored_samples == 192

    fed = make(0)
    trained: list[int] = []
    for batch in fed:  # record() files the training forward's losses under the yielded batch's own indices
        fed.record(torch.full((batch[0].shape[0],), 42.0))
        trained += (batch[0][:, 0] * 1e6).round().long().tolist()
    fed.feedback.settle()  # recorded losses reach the memory a batch later (the host never waits for them)
    remembered = fed.memory.read(torch.arange(96))
    firsts = (fed.dataloader.dataset.tensors[0][:, 0] * 1e6).round().long().tolist()
    assert {firsts[i] for i in (remembered == 42.0).nonzero().flatten().tolist()} == set(trained)
    assert len(trained) == fed.stats.kept_samples < 96
    with pytest.raises(ValueError, match="more often than batches were yielded"):
        fed.record(torch.zeros(3))
    next(iter(fed))
    with pytest.raises(ValueError, match="record\\(\\) got 3 losses"):
        fed.record(torch.zeros(3))
    with pytest.raises(ValueError, match="scoring='memory' needs sample indices"):
        SiftingDataLoader([(torch.zeros(2, 4), torch.zeros(2).long())], torch.nn.Linear(4, 2), cross_entropy_loss,
                          SiftConfig(scoring="memory"), batch_size=2, exact_len=False)


class _Counted(torch.utils.data.Dataset):
    """Row i holds the value i / n; every fetch is counted (sampler-level skipping must avoid them)."""

    def __init__(self, n: int = 96) -> None:
        self.n, self.fetched = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.fetched.append(i)
        return torch.tensor([i / self.n, 0.0]), torch.tensor(i % 2)


def _value_loss(model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    """The loss of a row is its value: decisions are known in advance, whatever the model does."""
    return batch[0][:, 0].clone()


def test_infobatch_weights_line_up_with_the_yielded_samples_and_reach_the_loss() -> None:
    data = _Counted(400)
    loader = SiftingDataLoader(DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0)),
                               torch.nn.Linear(2, 2), _value_loss,
                               SiftConfig(mode="infobatch", prune_fraction=0.5, loss_history_length=2000, seed=0),
                               meta_in_batch=True)
    low, high = [], []
    for batch in loader:
        values, weights = batch[0][:, 0], loader.last_weights
        assert weights is None or weights.shape == values.shape
        w = torch.ones_like(values) if weights is None else weights
        assert torch.equal(loader.training_loss(values.clone()), (values * w).mean())  # recorded and weighted
        low += values[w == 2].tolist()
        high += values[w == 1].tolist()
    assert max(low) < 0.6 and min(high) > 0.4  # weight 2 only below the (rolling) mean of about 0.5
    assert 0.6 < loader.stats.kept_fraction < 0.9
    dict_loader = SiftingDataLoader(DataLoader([{"x": torch.tensor([float(i)]), "labels": torch.tensor(0)} for i in range(32)],
                                               batch_size=8), torch.nn.Linear(1, 1), lambda m, b: b["x"][:, 0],
                                    SiftConfig(mode="infobatch", seed=0), meta_in_batch=True)
    batch = next(iter(dict_loader))
    assert {"sift_weight", "sift_index"} <= set(batch) and batch["sift_index"].tolist() == batch["x"][:, 0].long().tolist()
    dict_loader.training_loss(batch["x"][:, 0], batch)
    assert "sift_weight" not in batch  # read and removed, so the batch can go on to the model


def test_memory_decisions_are_made_at_the_sampler_so_dropped_samples_are_never_fetched() -> None:
    data = _Counted(96)
    loader = SiftingDataLoader(DataLoader(data, batch_size=8), torch.nn.Linear(2, 2), _value_loss,
                               SiftConfig(beta=2.0, scoring="memory", memory_max_age=None, sift_delay=12, seed=0), exact_len=False)
    for batch in loader:  # epoch 1: the delay; the training losses are recorded (free) and fill the history
        loader.record(batch[0][:, 0])
    loader.feedback.settle()  # the last batch's losses arrive a batch later
    assert loader.stats.scored_samples == 0 and loader.sifter.history.numel() == 96
    data.fetched.clear()
    kept_values = []
    for batch in loader:
        kept_values += batch[0][:, 0].tolist()
        loader.record(batch[0][:, 0])
    epoch = loader.stats.epochs[-1]
    assert epoch.scored_samples == 0 and epoch.memory_samples == 96
    assert len(data.fetched) == epoch.kept_samples == len(kept_values) < 96  # only kept samples were loaded
    assert sorted(data.fetched) == sorted(round(v * 96) for v in kept_values)


@pytest.mark.parametrize("stop,workers", [(2, 0), (5, 2)])
def test_resume_with_decisions_at_the_sampler_reproduces_an_uninterrupted_run(stop: int, workers: int) -> None:
    """With workers the sampler runs ahead: the decisions it made for batches not yet trained are saved and replayed."""

    def make() -> SiftingDataLoader:
        from siftcli.training.setup import SeededSampler  # an order fixed by (seed, epoch), as a resumable run needs

        return SiftingDataLoader(DataLoader(_Counted(120), batch_size=8, sampler=SeededSampler(120, 3), num_workers=workers),
                                 torch.nn.Linear(2, 2), _value_loss,
                                 SiftConfig(mode="infobatch", scoring="memory", memory_max_age=None, sift_delay=15, seed=4),
                                 epochs=3)

    def run(loader: SiftingDataLoader, batches: int | None = None) -> list[list[float]]:
        out, it = [], iter(loader)
        for batch in it if batches is None else (next(it) for _ in range(batches)):
            out.append(batch[0][:, 0].tolist())
            loader.training_loss(batch[0][:, 0])
        return out

    full = make()
    reference = [b for _ in range(3) for b in run(full)]
    first = make()
    got = run(first) + run(first, stop)  # epoch 1 whole, then part of epoch 2 (decided at the sampler)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    got += run(resumed) + run(resumed)
    assert got == reference
    assert resumed.stats.kept_samples == full.stats.kept_samples and resumed.stats.memory_samples == full.stats.memory_samples


def test_anneal_needs_the_run_length_and_keeps_everything_at_the_end() -> None:
    with pytest.raises(ValueError, match="anneal_fraction needs epochs"):
        SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig(anneal_fraction=0.25), exact_len=False)
    loader = SiftingDataLoader(_tuple_loader(n=96, batch=8), torch.nn.Linear(4, 2), cross_entropy_loss,
                               SiftConfig(beta=3.0, anneal_fraction=0.25, seed=0), epochs=4, exact_len=False)
    lengths = [len(loader)]
    for _ in range(4):
        list(loader)
        lengths.append(len(loader))
    last = loader.stats.epochs[-1]
    assert last.kept_samples == last.raw_samples == 96 and last.scored_samples == 0  # no scoring forward either
    assert all(e.kept_samples < 96 for e in loader.stats.epochs[:3])
    assert loader.stats.anneal_started_at == 36 and lengths[3] == 12  # len() knows the last epoch keeps everything


def test_record_follows_the_order_batches_were_yielded_in_when_the_loop_fetches_ahead() -> None:
    data = _Counted(64)
    loader = SiftingDataLoader(DataLoader(data, batch_size=8), torch.nn.Linear(2, 2), _value_loss,
                               SiftConfig(mode="all", scoring="fresh"))
    it = iter(loader)
    ahead = [next(it), next(it), next(it)]  # like Lightning's prefetch or gradient accumulation
    for batch in ahead:
        loader.record(batch[0][:, 0] + 10)
    loader.feedback.settle()
    remembered = loader.memory.read(torch.arange(24))
    assert torch.allclose(remembered, torch.arange(24) / 64 + 10)


def test_refresh_by_training_never_scores_and_trains_every_sample_within_the_age_limit() -> None:
    """memory_refresh='train': the first epoch trains everything (nothing is known), later epochs rank only losses the
    training forward gave, and a sample whose loss grew older than memory_max_age is kept so training renews it."""
    data = _Counted(96)
    loader = SiftingDataLoader(DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)),
                               torch.nn.Linear(2, 2), _value_loss,
                               SiftConfig(mode="calibrated", keep_fraction=0.25, beta=2.0, scoring="memory", memory_max_age=2,
                                          memory_refresh="train", seed=0), exact_len=False)
    last_trained = torch.full((96,), -1)
    for epoch in range(7):
        data.fetched.clear()
        for batch in loader:
            values = batch[0][:, 0]
            loader.record(values)  # the training forward's losses: the only scores there are
            last_trained[(values * 96).round().long()] = epoch
        assert (epoch - last_trained <= 3).all()  # nobody waits more than memory_max_age + 1 epochs
        if epoch == 0:
            assert loader.stats.kept_samples == 96  # nothing known yet: all trained, all recorded
    assert loader.stats.scored_samples == 0 and loader.scorer.seconds == 0.0
    assert loader.stats.nonfinite == 0
    later = loader.stats.epochs[-1]
    assert later.kept_samples < 96 and len(data.fetched) == later.kept_samples  # decided at the sampler
    assert sum(loader.stats.score_ages) + loader.stats.score_unknown == loader.stats.sifted_raw_samples
    assert loader.stats.score_unknown == 96 and len(loader.stats.score_ages) <= 4  # ages 0..3 at most
    assert len(loader.stats.kept_overlap) == 6 and all(0 <= o <= 1 for o in loader.stats.kept_overlap)
    with pytest.raises(ValueError, match="needs a memory_max_age"):
        SiftConfig(scoring="memory", memory_refresh="train", memory_max_age=None)


def test_fresh_scores_are_age_zero_and_each_pair_of_epochs_has_an_overlap() -> None:
    loader = SiftingDataLoader(DataLoader(_Counted(64), batch_size=8), torch.nn.Linear(2, 2), _value_loss,
                               SiftConfig(mode="calibrated", keep_fraction=0.25, beta=50.0, loss_history_length=64, seed=0))
    for _ in range(3):
        list(loader)
    assert loader.stats.score_ages == [loader.stats.sifted_raw_samples] and loader.stats.score_unknown == 0
    assert len(loader.stats.kept_overlap) == 2 and all(0 < o <= 1 for o in loader.stats.kept_overlap)


@pytest.mark.parametrize("make_sampler", [
    lambda ds: torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=0, shuffle=False),
    lambda ds: torch.utils.data.SubsetRandomSampler(range(10), generator=torch.Generator().manual_seed(0)),
    lambda ds: torch.utils.data.WeightedRandomSampler([1.0] * len(ds), 12, generator=torch.Generator().manual_seed(0)),
], ids=["distributed", "subset", "weighted"])
def test_len_counts_the_batches_the_sampler_really_gives(make_sampler) -> None:  # noqa: ANN001
    """A loop plans its steps and schedule from len(): it must be the batches of the rows the sampler draws, not of the
    whole data set (a DistributedSampler over two ranks gives each half)."""
    x = torch.randn(30, 3)
    ds = torch.utils.data.TensorDataset(x, torch.zeros(30, dtype=torch.long))
    base = DataLoader(ds, batch_size=4, sampler=make_sampler(ds))
    loader = SiftingDataLoader(base, torch.nn.Linear(3, 2), cross_entropy_loss, SiftConfig(mode="all"))
    assert len(loader) == len(list(loader)) == len(base)


def _exact(n: int = 403, epochs: int = 4, shuffle: bool = True, **config: object) -> SiftingDataLoader:
    model = torch.nn.Linear(4, 2)
    model.load_state_dict({"weight": torch.eye(2, 4), "bias": torch.zeros(2)})
    return SiftingDataLoader(_tuple_loader(n=n, shuffle=shuffle), model, cross_entropy_loss,
                             SiftConfig(**{"beta": 1.0, "loss_history_length": 40, "seed": 3, **config}),
                             epochs=epochs, exact_len=True)


def _stop_at_len(loader: SiftingDataLoader) -> list[torch.Tensor]:
    """One epoch as the HF Trainer and Lightning take it: ``len()`` batches, then the iterator is abandoned."""
    it, out = iter(loader), []
    for _ in range(len(loader)):
        out.append(next(it)[0].clone())
    return out


@pytest.mark.parametrize("config", [{}, {"sift_delay": 7}, {"mode": "infobatch"}, {"beta": 3.0, "sift_delay": 2}])
def test_exact_len_yields_len_batches_every_epoch_and_offers_every_raw_row(config: dict) -> None:
    """Probabilistic draws vary by epoch; a trainer that plans from len() still gets exactly len() batches each epoch,
    and stopping there loses no raw row (the last promised batch waits for the epoch's last raw batch)."""
    torch.manual_seed(0)
    loader = _exact(**config)
    promised, trained = len(loader), 0
    for epoch in range(4):
        got = _stop_at_len(loader)
        assert len(got) == promised == len(loader)
        assert loader.stats.epochs[epoch].raw_samples == 403  # every raw row offered, though the loop stopped at len()
        trained += sum(b.shape[0] for b in got)
    kept = sum(e.kept_samples for e in loader.stats.epochs)
    assert kept == trained + loader.outbox.rows()  # every kept row was trained or waits for the next epoch
    assert loader.outbox.rows() < 3 * 8


def test_exact_len_without_a_stopping_loop_ends_each_epoch_at_len_too() -> None:
    loader = _exact(sift_delay=5)
    counts = [sum(1 for _ in loader) for _ in range(4)]
    assert counts == [len(loader)] * 4
    assert [e.epoch for e in loader.stats.epochs] == [0, 1, 2, 3]


def test_exact_len_is_the_run_average_and_a_one_off_delay_carries_into_later_epochs() -> None:
    plain = _exact(sift_delay=20)
    plain.quota.enabled = False
    first_epoch = len(plain)  # the delay's 20 whole batches in the first epoch's count
    loader = _exact(sift_delay=20)
    assert len(loader) < first_epoch  # averaged over 4 epochs
    _stop_at_len(loader)
    assert loader.outbox.rows() > 8  # the delay's surplus waits for the next epochs instead of being dropped


@pytest.mark.parametrize("stop", [3, 11, 999])  # 999: saved after the epoch's promised batches, before the next pass
def test_exact_len_resumes_mid_epoch_and_after_the_promised_batches_exactly(stop: int) -> None:
    full = _exact(sift_delay=4, shuffle=False)  # the same order on resume, as a sampler seeded per epoch gives
    reference = [b for _ in range(3) for b in _stop_at_len(full)]

    first = _exact(sift_delay=4, shuffle=False)
    got = _stop_at_len(first)
    it = iter(first)
    for _ in range(stop if stop < len(first) else len(first)):
        got.append(next(it)[0].clone())
    state = first.state_dict()
    resumed = _exact(sift_delay=4, shuffle=False)
    resumed.load_state_dict(state)
    if stop < len(first):
        rest = iter(resumed)
        got += [next(rest)[0].clone() for _ in range(len(first) - stop)]
    got += _stop_at_len(resumed)
    assert len(got) == len(reference)
    assert all(torch.equal(a, b) for a, b in zip(got, reference))


def _shuffled_run(own_generator: bool, scoring: str, stop: tuple[int, int] | None, state_file: str | None = None,
                  resume_from: str | None = None) -> list[torch.Tensor]:
    """Three epochs of a shuffled ``DataLoader`` (the docs' shape), a model trained on the sifted batches; ``stop``
    (epoch, batch): save everything a user saves there (loader, model, optimizer, the global RNG) and return;
    ``resume_from``: a fresh loader, model and optimizer that load it and train to the end."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(90, 4, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(7)
    base = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True,
                      generator=torch.Generator().manual_seed(1) if own_generator else None)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    sifted = SiftingDataLoader(base, model, cross_entropy_loss, SiftConfig(beta=1.0, loss_history_length=24, seed=3,
                                                                            scoring=scoring))
    start = 0
    if resume_from is not None:
        saved = torch.load(resume_from, weights_only=True)
        sifted.load_state_dict(saved["loader"])
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
        start = saved["epoch"]
    for epoch in range(start, 3):
        for i, batch in enumerate(sifted):
            loss = sifted.training_loss(cross_entropy_loss(model, batch))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if stop == (epoch, i):
                break
        if stop in ((epoch, i), (epoch, -1)):  # -1: after the epoch's last batch
            torch.save({"loader": sifted.state_dict(), "model": model.state_dict(), "rng": torch.get_rng_state(),
                        "optimizer": optimizer.state_dict(), "epoch": epoch + (stop[1] == -1)}, state_file)
            return []
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("own_generator", [True, False], ids=["generator", "global-rng"])
@pytest.mark.parametrize("scoring", ["fresh", "memory"])
def test_a_shuffled_dataloader_resumes_exactly_in_any_epoch(tmp_path, own_generator: bool, scoring: str) -> None:
    """Stopped mid-epoch in each of three epochs (and between two), loaded into a loader made afresh: the same weights
    as the uninterrupted run (the resumed epoch draws its order from what the interrupted one drew it from)."""
    whole = _shuffled_run(own_generator, scoring, None)
    for stop in ((0, 3), (1, 2), (2, 1), (1, -1)):
        path = str(tmp_path / f"state{stop}.pt")
        assert _shuffled_run(own_generator, scoring, stop, path) == []  # stopped there
        torch.manual_seed(12345)  # another process's RNG: the resume must not depend on it
        resumed = _shuffled_run(own_generator, scoring, None, resume_from=path)
        assert all(torch.equal(a, b) for a, b in zip(whole, resumed)), (stop, whole, resumed)


def test_a_shuffled_dataloader_resumes_exactly_in_a_new_process(tmp_path) -> None:
    import subprocess
    import sys

    whole = _shuffled_run(True, "memory", None)
    path = tmp_path / "state.pt"
    _shuffled_run(True, "memory", (1, 3), str(path))
    code = ("import sys, torch; sys.path.insert(0, '.'); from tests.test_loader import _shuffled_run; "
            f"torch.save(_shuffled_run(True, 'memory', None, resume_from={str(path)!r}), {str(tmp_path / 'w.pt')!r})")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parent.parent))
    resumed = torch.load(tmp_path / "w.pt", weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(whole, resumed))


@pytest.mark.parametrize("order", ["gpu", "cpu"])
def test_a_state_saved_by_the_previous_layout_resumes_with_the_same_batches(order: str, monkeypatch) -> None:
    """``tests/data/loader_state_v1.pt`` holds states the version before the loader's parts owned their state saved
    (layout 1: a raw batch waiting for its scores in the GPU's order; rows packed and buffered), and what that loader
    yielded after them (tests/data/make_loader_state_v1.py made it); this version upgrades and continues identically."""
    from pathlib import Path

    from tests.data.make_loader_state_v1 import make

    saved = torch.load(Path(__file__).parent / "data" / "loader_state_v1.pt", weights_only=True)[order]
    assert "version" not in saved["state"] and (saved["state"]["waiting"] is not None) == (order == "gpu")
    monkeypatch.setattr(loader_module, "OVERLAP_DEVICES", loader_module.OVERLAP_DEVICES)  # make() sets it
    loader = make(order == "gpu")
    loader.load_state_dict(saved["state"])
    got = []
    for _ in range(2):  # the rest of epoch 1, then epoch 2
        for b in loader:
            loader.training_loss(cross_entropy_loss(loader.model, b))
            got.append(b[0].clone())
    assert len(got) == len(saved["rest"]) and all(torch.equal(a, b) for a, b in zip(got, saved["rest"]))
    assert loader.stats.kept_samples == saved["kept"]


def test_a_state_of_a_newer_layout_is_refused_naming_the_versions() -> None:
    loader = SiftingDataLoader(_tuple_loader(), torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig())
    with pytest.raises(ValueError, match=r"layout version 3; this siftcli reads versions 1 to 2"):
        loader.load_state_dict({**loader.state_dict(), "version": 3})


def test_a_dropping_loader_gets_full_batches_only_and_len_counts_them() -> None:
    """``DataLoader(drop_last=True)`` (timm's, mixup needs pairs, BatchNorm a second row): every sifted batch full, with
    and without ``exact_len``, and ``len()`` the count it yields."""
    for exact in (False, True):
        base = DataLoader(_tuple_loader(n=100).dataset, batch_size=8, drop_last=True)
        loader = SiftingDataLoader(base, torch.nn.Linear(4, 2), cross_entropy_loss,
                                   SiftConfig(beta=1.0, sift_delay=2, mode="calibrated", seed=1), exact_len=exact, epochs=3)
        for _ in range(3):
            promised = len(loader)
            sizes = [b[0].shape[0] for b in loader]
            assert sizes and set(sizes) == {8}, (exact, sizes)
            assert len(sizes) == promised or not exact


def test_the_wrapped_loaders_own_attributes_are_read_and_set_through_the_wrapper() -> None:
    class Prefetcher(DataLoader):  # timm's loader: train.py turns mixup off by assigning to the loader it holds
        mixup_enabled = True

    base = Prefetcher(_tuple_loader().dataset, batch_size=8)
    loader = SiftingDataLoader(base, torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig())
    assert loader.mixup_enabled is True
    loader.mixup_enabled = False
    assert base.mixup_enabled is False and "mixup_enabled" not in vars(loader)
    loader.note = "mine"  # an attribute the wrapped loader lacks stays on the wrapper
    assert loader.note == "mine" and not hasattr(base, "note")
    with pytest.raises(AttributeError, match="nor has the Prefetcher it wraps"):
        loader.missing  # noqa: B018
    with pytest.raises(AttributeError, match="no batch_sampler to rebuild a loader from"):
        loader.batch_sampler  # noqa: B018


def test_soft_targets_are_scored_as_soft_targets() -> None:
    """timm's mixup hands ``(images, soft_targets)``: cross-entropy against the mixed distribution, never ``.long()``."""
    model = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    soft = torch.softmax(torch.randn(5, 3), dim=1)
    expected = -(soft * torch.log_softmax(model(x), dim=1)).sum(1)
    assert torch.allclose(cross_entropy_loss(model, (x, soft)), expected, atol=1e-6)


def test_a_nested_mapping_reaches_the_model_whole() -> None:
    class TwoInputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

        def forward(self, text: torch.Tensor, image: dict) -> torch.Tensor:
            return self.head(text + image["pixels"])

    batch = {"text": torch.randn(3, 4), "image": {"pixels": torch.randn(3, 4)}, "labels": torch.tensor([0, 1, 0]),
             "ids": ["a", "b", "c"]}
    assert hf_loss(TwoInputs(), batch).shape == (3,)


def test_a_dataclass_batch_is_packed_yielded_and_resumed_as_its_class(tmp_path) -> None:
    def collate(rows: list) -> Pair:
        return Pair(torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))

    def loss(model: torch.nn.Module, batch: Pair) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(batch.inputs), batch.labels, reduction="none")

    def make() -> SiftingDataLoader:
        model = torch.nn.Linear(4, 2)
        model.load_state_dict({"weight": torch.eye(2, 4), "bias": torch.zeros(2)})
        return SiftingDataLoader(DataLoader(_tuple_loader(n=64).dataset, batch_size=8, collate_fn=collate), model, loss,
                                 SiftConfig(beta=1.0, loss_history_length=16, seed=2))

    whole = [b.inputs.clone() for b in make()]
    first = make()
    it = iter(first)
    got = [next(it).inputs.clone() for _ in range(2)]
    assert isinstance(next(iter(make())), Pair)
    torch.save(first.state_dict(), tmp_path / "s.pt")
    resumed = make()
    resumed.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    rest = list(resumed)
    assert all(isinstance(b, Pair) for b in rest)
    got += [b.inputs.clone() for b in rest]
    assert len(got) == len(whole) and all(torch.equal(a, b) for a, b in zip(got, whole))


@dataclasses.dataclass
class Pair:
    """A collate's dataclass batch (module level, as a resumed state finds its class by name)."""

    inputs: torch.Tensor
    labels: torch.Tensor


def test_the_default_exact_length_is_what_each_epoch_yields_and_resumes_where_only_carried_rows_went_out() -> None:
    """The default (``exact_len``) without ``epochs``: ``len()`` asked before each epoch (a loop sizing its progress bar
    or schedule) is what that epoch yields (its promise was once recomputed as if mid-epoch: 13 said, 14 yielded); a
    state saved after an epoch's first batches, all carried over from the last epoch (no raw batch offered yet),
    continues that epoch (it once started a new one: 13 batches where 8 were left)."""

    def make() -> SiftingDataLoader:
        model = torch.nn.Linear(4, 2)
        model.load_state_dict({"weight": torch.eye(2, 4), "bias": torch.zeros(2)})
        return SiftingDataLoader(_tuple_loader(n=200), model, cross_entropy_loss,
                                 SiftConfig(beta=1.0, loss_history_length=40, sift_delay=3, seed=11), batch_size=3)

    full, said, yielded, reference = make(), [], [], []
    for _ in range(3):
        said.append(len(full))
        batches = [b[0].clone() for b in full]
        yielded.append(len(batches))
        reference.append(batches)
    assert said == yielded and said[0] > said[1]  # the delay's whole batches in the first epoch only

    first = make()
    list(first)
    it = iter(first)
    head = [next(it)[0].clone() for _ in range(5)]
    state = first.state_dict()
    assert state["cursor"]["offered"] == 0  # the five came from rows the first epoch carried over
    resumed = make()
    resumed.load_state_dict(state)
    rest = [b[0].clone() for b in resumed]
    assert len(head) + len(rest) == yielded[1]
    assert all(torch.equal(a, b) for a, b in zip(head + rest, reference[1]))


class BucketBatchSampler(torch.utils.data.Sampler):
    """Batches of rows of about one length (sorted within windows of 8 batches, the batches' order shuffled): the
    shape of a length-grouping sampler (the HF Trainer's ``group_by_length``)."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0) -> None:
        self.lengths, self.batch_size, self.seed = lengths, batch_size, seed

    def __iter__(self):  # noqa: ANN204
        g = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        window = 8 * self.batch_size
        batches = []
        for lo in range(0, len(order), window):
            chunk = sorted(order[lo:lo + window], key=lambda i: self.lengths[i])
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        yield from (batches[i] for i in torch.randperm(len(batches), generator=g).tolist())

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


def _lengths_loader(n: int = 256, batch: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 64, (n,), generator=g).tolist()
    rows = [{"input_ids": torch.randint(1, 50, (k,), generator=g), "labels": i % 2} for i, k in enumerate(lengths)]

    def collate(items: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in items)
        ids = torch.zeros(len(items), width, dtype=torch.long)
        mask = torch.zeros(len(items), width, dtype=torch.long)
        for i, r in enumerate(items):
            ids[i, :len(r["input_ids"])], mask[i, :len(r["input_ids"])] = r["input_ids"], 1
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r["labels"] for r in items])}

    return DataLoader(rows, batch_sampler=BucketBatchSampler(lengths, batch), collate_fn=collate)


def _padding_share(batches: list[dict]) -> float:
    masks = [b["attention_mask"] for b in batches]
    return 1 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)


def test_kept_rows_are_packed_within_their_length_bucket() -> None:
    """A length-grouping batch sampler's low padding survives packing: kept rows wait in lanes of about their width
    (on by default where the sampler's name says it groups by length); every kept row is yielded once either way."""
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.EmbeddingBag(50, 2, mode="sum")

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: object) -> object:
            return type("Out", (), {"logits": self.emb(input_ids, per_sample_weights=attention_mask.float())})

    raw = _padding_share(list(_lengths_loader()))
    got = {}
    for by_length in (False, None):
        loader = SiftingDataLoader(_lengths_loader(), Model(), hf_loss, SiftConfig(beta=1.0, sift_delay=2, seed=0),
                                   pack_by_length=by_length, exact_len=False)
        batches = list(loader) + list(loader)
        assert sum(len(b["labels"]) for b in batches) == loader.stats.kept_samples  # every kept row, once
        assert all(len(b["labels"]) == 8 for b in batches[:len(batches) // 2 - 1])
        got[by_length] = _padding_share(batches)
    assert loader.outbox.by_length  # auto: the sampler groups by length
    assert got[None] < 0.5 * got[False] and got[None] < raw + 0.1, (raw, got)


def test_the_trainers_group_by_length_turns_packing_by_length_on(tmp_path) -> None:  # noqa: ANN001
    """The Hugging Face Trainer's ``group_by_length`` hands the loader a ``LengthGroupedSampler`` (behind accelerate's
    wrapper): the sifting loader sees it and packs kept rows within their length lanes."""
    from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=64))
    loader = _lengths_loader(64)
    rows = [dict(r) for r in loader.dataset]
    for grouped in (True, False):
        args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=1, report_to=[],
                                 use_cpu=True, disable_tqdm=True, save_strategy="no",
                                 train_sampling_strategy="group_by_length" if grouped else "random")
        trainer = SiftingTrainer(model=model, args=args, train_dataset=rows, data_collator=loader.collate_fn,
                                 sift_config=SiftConfig(beta=1.0, sift_delay=2, seed=0))
        assert trainer.get_train_dataloader().outbox.by_length is grouped


class NoDuplicatesBatchSampler(torch.utils.data.BatchSampler):
    """A batch sampler whose batches repeat no text (sentence-transformers' promise for in-batch negatives): rows with
    a text already in the batch wait for a later one."""

    def __init__(self, texts: list[int], batch_size: int) -> None:
        self.texts, self.batch_size, self.drop_last = texts, batch_size, False

    def __iter__(self):  # noqa: ANN204
        waiting = torch.randperm(len(self.texts), generator=torch.Generator().manual_seed(0)).tolist()
        while waiting:
            batch, seen, passed = [], set(), []
            for i in waiting:
                if len(batch) < self.batch_size and self.texts[i] not in seen:
                    batch.append(i)
                    seen.add(self.texts[i])
                else:
                    passed.append(i)
            yield batch
            waiting = passed

    def __len__(self) -> int:
        return -(-len(self.texts) // self.batch_size)


@pytest.mark.parametrize("order", ["cpu", "gpu"])
def test_packing_keeps_a_no_duplicates_batch_free_of_repeated_text(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """Kept rows from several raw batches never put one text twice in a batch where the batch sampler promised none
    (on by default for a ``NoDuplicates`` sampler; the text is read from ``*input_ids`` under its mask, whatever its
    padding); without the rule most packed batches repeat one; every kept row is yielded once either way. In both
    decision orders (the GPU's decides a scored batch one batch later, its rows' keys on their way to the host)."""
    monkeypatch.setattr(loader_module, "OVERLAP_DEVICES", ("cuda", "cpu") if order == "gpu" else ("cuda",))
    texts = [i % 12 for i in range(96)]  # 12 texts, 8 rows each, in batches of 8; each row its own score
    scores = torch.rand(96, generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": torch.tensor([t + 1] * (1 + t % 5)), "labels": scores[i]} for i, t in enumerate(texts)]

    def collate(items: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in items)
        ids = torch.stack([torch.nn.functional.pad(r["input_ids"], (0, width - len(r["input_ids"]))) for r in items])
        return {"input_ids": ids, "attention_mask": ids.ne(0).long(), "labels": torch.stack([r["labels"] for r in items])}

    def loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
        return batch["labels"] + 0 * model(batch["input_ids"].float().sum(1, keepdim=True)).flatten()

    repeats = {}
    for distinct in (None, False):
        base = DataLoader(rows, batch_sampler=NoDuplicatesBatchSampler(texts, 8), collate_fn=collate)
        loader = SiftingDataLoader(base, torch.nn.Linear(1, 1), loss, SiftConfig(beta=1.0, sift_delay=1, seed=0),
                                   pack_distinct=distinct, exact_len=False)
        batches = list(loader) + list(loader)
        assert sum(len(b["labels"]) for b in batches) == loader.stats.kept_samples
        keys = [[tuple(r[m.bool()].tolist()) for r, m in zip(b["input_ids"], b["attention_mask"])] for b in batches]
        repeats[distinct] = sum(len(set(k)) < len(k) for k in keys) / len(batches)
        if distinct is None:
            assert loader.outbox.distinct and sum(len(b["labels"]) == 8 for b in batches) >= len(batches) - 4
    assert repeats[None] == 0 and repeats[False] > 0.3, repeats


@pytest.mark.parametrize("order", ["cpu", "gpu"])
def test_an_exact_length_epoch_never_ends_on_a_lone_row(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """Whatever the keep decisions drew, an epoch that must yield its promised count ends on a batch of two rows or
    more (a lone row has no in-batch negative, and breaks BatchNorm and mixup's pairs): its floor keeps two in its tail.
    In both decision orders."""
    monkeypatch.setattr(loader_module, "OVERLAP_DEVICES", ("cuda", "cpu") if order == "gpu" else ("cuda",))
    smallest, lengths = [], set()
    for seed in range(12):
        loader = SiftingDataLoader(_tuple_loader(n=97), torch.nn.Linear(4, 2), cross_entropy_loss,
                                   SiftConfig(beta=1.0, sift_delay=1, seed=seed))
        for _ in range(3):
            sizes = [len(y) for _, y in loader]
            smallest.append(min(sizes))
            lengths.add(len(sizes) == len(loader))
    assert min(smallest) >= 2 and lengths == {True}, smallest
