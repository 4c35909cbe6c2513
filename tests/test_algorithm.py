"""The pure functions and the stateful sifter."""

from __future__ import annotations

import pytest
import torch

from siftcli.sift import SiftConfig, Sifter, algorithm

PUBLISHED = {0.1: 0.9091, 0.25: 0.80, 0.5: 0.6667, 1: 0.50, 2: 0.3333, 3: 0.25, 10: 0.0909}


@pytest.mark.parametrize("beta,expected", sorted(PUBLISHED.items()))
def test_kept_fraction_matches_published_table(beta: float, expected: float) -> None:
    """On a stationary stream the kept fraction is 1/(1+beta), within 1.5 points over 20,000 samples."""
    sifter = Sifter(SiftConfig(beta=beta, loss_history_length=500, seed=7))
    stream = torch.Generator().manual_seed(123)
    kept = 0
    for _ in range(625):
        kept += int(sifter.decide(torch.rand(32, generator=stream), 32).sum())
    assert abs(kept / 20_000 - expected) < 0.015
    assert algorithm.target_keep_fraction(beta) == pytest.approx(expected, abs=1e-4)


def test_percentiles_are_mid_rank() -> None:
    history = torch.tensor([1.0, 2.0, 3.0, 4.0])
    pct = algorithm.percentiles(torch.tensor([0.0, 2.0, 5.0]), history)
    assert pct.tolist() == pytest.approx([0.0, 0.375, 1.0])
    assert algorithm.percentiles(torch.tensor([1.0]), torch.empty(0)).item() == 1.0


def test_keep_probability_is_percentile_power_beta() -> None:
    pct = torch.tensor([0.0, 0.5, 1.0])
    assert algorithm.keep_probability(pct, 2.0).tolist() == pytest.approx([0.0, 0.25, 1.0])


def test_calibrated_count_never_drifts() -> None:
    carry, total = 0.0, 0
    for _ in range(1000):
        k, carry = algorithm.calibrated_count(32, 1 / 3, carry)
        total += k
    assert abs(total - 32_000 / 3) <= 1


def test_calibrated_mode_holds_target_on_falling_losses() -> None:
    """Losses that fall over time push the probabilistic rate below target; calibrated stays on it."""
    rates = {}
    for mode in ("probabilistic", "calibrated"):
        sifter = Sifter(SiftConfig(beta=1.0, loss_history_length=256, mode=mode, seed=0))
        g = torch.Generator().manual_seed(0)
        kept = 0
        for step in range(300):
            losses = torch.rand(32, generator=g) * (1.0 / (1 + step * 0.05))
            kept += int(sifter.decide(losses, 32).sum())
        rates[mode] = kept / (300 * 32)
    assert rates["probabilistic"] < 0.45
    assert abs(rates["calibrated"] - 0.5) < 0.005


def test_calibrated_prefers_high_losses() -> None:
    sifter = Sifter(SiftConfig(beta=3.0, loss_history_length=64, mode="calibrated", seed=0))
    sifter.decide(torch.linspace(0, 1, 64), 64)
    hits = torch.zeros(32)
    for _ in range(200):
        hits += sifter.decide(torch.linspace(0, 1, 32), 32).float()
    assert hits[-8:].mean() > 4 * hits[:8].mean()


def test_delay_keeps_everything_and_repeats_per_epoch() -> None:
    sifter = Sifter(SiftConfig(beta=10.0, loss_history_length=8, sift_delay=3, repeat_delay_per_epoch=True))
    losses = torch.rand(4)
    assert all(sifter.decide(losses, 4).all() for _ in range(3))
    assert not sifter.in_delay
    sifter.start_epoch()
    assert sifter.in_delay


def test_delay_scores_only_what_fills_the_history() -> None:
    sifter = Sifter(SiftConfig(loss_history_length=16, sift_delay=10))
    wants = []
    for _ in range(10):
        wants.append(sifter.wants_scores(8))
        sifter.decide(torch.rand(8) if wants[-1] else None, 8)
    assert wants == [False] * 8 + [True] * 2
    assert sifter.history.numel() == 16


def test_nonfinite_losses_are_kept_and_counted() -> None:
    sifter = Sifter(SiftConfig(beta=100.0, loss_history_length=8))
    sifter.decide(torch.rand(8), 8)
    with pytest.warns(RuntimeWarning, match="NaN or Inf"):
        mask = sifter.decide(torch.tensor([float("nan"), float("inf"), 0.0, 0.0]), 4)
    assert mask[:2].all()
    assert sifter.nonfinite == 2
    assert torch.isfinite(sifter.history).all()


def test_state_dict_round_trip_reproduces_decisions() -> None:
    a = Sifter(SiftConfig(beta=1.0, loss_history_length=20, seed=3))
    g = torch.Generator().manual_seed(1)
    batches = [torch.rand(8, generator=g) for _ in range(12)]
    for x in batches[:5]:
        a.decide(x, 8)
    b = Sifter(SiftConfig(beta=1.0, loss_history_length=20, seed=99))
    b.load_state_dict(a.state_dict())
    for x in batches[5:]:
        assert torch.equal(a.decide(x, 8), b.decide(x, 8))


@pytest.mark.parametrize("bad", [{"beta": 0}, {"beta": -1}, {"loss_history_length": 0}, {"sift_delay": -1}, {"mode": "x"},
                                 {"sift_delay": "soon"}, {"sift_delay": "auto", "repeat_delay_per_epoch": True},
                                 {"prune_fraction": 1.0}, {"prune_fraction": -0.1}, {"anneal_fraction": 1.0},
                                 {"anneal_fraction": -0.5}])
def test_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        SiftConfig(**bad)


def test_random_and_all_modes_need_no_scores_and_keep_what_they_promise() -> None:
    rnd = Sifter(SiftConfig(mode="random", keep_fraction=0.3, sift_delay=2, seed=1))
    assert not rnd.wants_scores(10)
    masks = [rnd.decide(None, 10) for _ in range(12)]
    assert all(bool(m.all()) for m in masks[:2])  # the delay keeps everything, as in the sifted arm
    assert sum(int(m.sum()) for m in masks[2:]) == 30  # exactly 30% of the 100 samples after the delay
    again = Sifter(SiftConfig(mode="random", keep_fraction=0.3, sift_delay=2, seed=1))
    assert all(torch.equal(a, again.decide(None, 10)) for a in masks)
    keep_all = Sifter(SiftConfig(mode="all"))
    assert not keep_all.wants_scores(4) and bool(keep_all.decide(None, 4).all()) and keep_all.config.target_keep_fraction == 1.0
    with pytest.raises(ValueError, match="needs the batch's scores"):
        Sifter(SiftConfig(mode="calibrated")).decide(None, 4)
    with pytest.raises(ValueError, match="keep_fraction must be in"):
        SiftConfig(keep_fraction=1.5)


def test_infobatch_drops_below_mean_samples_at_rate_r_and_reweights_the_survivors() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.cat([torch.zeros(5000), torch.ones(5000)])
    mask, weights = algorithm.infobatch_keep(scores, 0.5, 0.3, g)
    assert mask[5000:].all() and (weights[5000:] == 1).all()  # at or above the mean: always kept, weight 1
    assert mask[:5000].float().mean().item() == pytest.approx(0.7, abs=0.02)  # below: dropped with probability r
    assert torch.allclose(weights[:5000], torch.full((5000,), 1 / 0.7))
    # unbiased: the expected weighted loss over the low part equals the unpruned one
    low = torch.rand(5000, generator=g) * 0.4
    m, w = algorithm.infobatch_keep(low, 0.5, 0.3, g)
    assert (low * w * m).sum().item() == pytest.approx(low.sum().item(), rel=0.05)


def test_infobatch_mode_ranks_against_the_history_mean_and_hands_out_weights() -> None:
    sifter = Sifter(SiftConfig(mode="infobatch", prune_fraction=0.5, loss_history_length=100, seed=0))
    sifter.decide(torch.linspace(0, 1, 100), 100)  # history mean 0.5
    kept, total = 0, 0
    for _ in range(50):
        mask, weights = sifter.decide_weighted(torch.tensor([0.1, 0.2, 0.8, 0.9]), 4)
        assert mask[2:].all() and torch.equal(weights, torch.tensor([2.0, 2.0, 1.0, 1.0]))
        kept, total = kept + int(mask[:2].sum()), total + 2
    assert 0.35 < kept / total < 0.65
    assert sifter.config.needs_scores and sifter.config.target_keep_fraction == 0.75


def test_importance_gain_is_one_plus_squared_cv_and_the_start_threshold_is_one_plus_s_over_a() -> None:
    assert algorithm.importance_gain(torch.full((10,), 0.7)) == pytest.approx(1.0)
    x = torch.tensor([0.0, 0.0, 0.0, 4.0])  # mean 1, E[x^2] 4
    assert algorithm.importance_gain(x) == pytest.approx(4.0)
    assert algorithm.importance_gain(torch.zeros(3)) == 1.0
    assert algorithm.start_threshold(0.2, 0.5) == pytest.approx(1.4)


def test_auto_delay_starts_only_when_the_gain_pays_for_the_scoring() -> None:
    sifter = Sifter(SiftConfig(sift_delay="auto", loss_history_length=32, seed=0))
    assert sifter.in_delay and sifter.wants_scores(8)  # the first batch is a probe (it measures s)
    assert not Sifter(SiftConfig(sift_delay="auto")).maybe_start(float("nan"))
    for _ in range(8):  # alike losses: gain 1, never worth it
        sifter.observe(torch.full((8,), 1.0) + 0.01 * torch.rand(8))
    assert not sifter.maybe_start(0.2) and sifter.started_at is None
    assert bool(sifter.decide(torch.rand(8), 8).all())  # still in the delay: everything kept
    g = torch.Generator().manual_seed(0)
    for _ in range(40):  # spread losses (exponential: gain about 2) once the model separates easy from hard
        sifter.observe(torch.empty(8).exponential_(generator=g))
    assert not sifter.maybe_start(2.0)  # too dear: 1 + 2/0.5 = 5 > gain
    assert sifter.maybe_start(0.2) and sifter.started_at == sifter.steps == 1
    assert not sifter.in_delay and not bool(sifter.decide(torch.rand(64), 64).all())
    restored = Sifter(SiftConfig(sift_delay="auto", loss_history_length=32, seed=0))
    restored.load_state_dict(sifter.state_dict())
    assert restored.started_at == 1 and not restored.in_delay


def test_anneal_keeps_everything_in_the_last_fraction_of_the_run() -> None:
    sifter = Sifter(SiftConfig(beta=5.0, loss_history_length=8, anneal_fraction=0.25, seed=0))
    assert sifter.anneal_start is None  # the run's length is unknown: no anneal
    sifter.total_steps = 20
    assert sifter.anneal_start == 15
    masks = [sifter.decide(torch.rand(8), 8) for _ in range(20)]
    assert not all(bool(m.all()) for m in masks[:15])
    assert all(bool(m.all()) for m in masks[15:]) and not sifter.wants_scores(8)
