"""runner's plain helpers: how the honest opponents are sized from the sifted run."""

from __future__ import annotations

from siftcli.runner import random_keep_changes


def test_random_keep_copies_the_kept_fraction_and_an_auto_delay_start() -> None:
    fixed = {"sift": {"sift_delay": 5}, "keep": {"achieved_after_delay": 0.4, "target": 0.5}}
    assert random_keep_changes(fixed) == {"mode": "random", "score": "loss", "keep_fraction": 0.4}
    auto = {"sift": {"sift_delay": "auto"}, "keep": {"achieved_after_delay": 0.45, "sift_started_at": 37}}
    assert random_keep_changes(auto) == {"mode": "random", "score": "loss", "keep_fraction": 0.45, "sift_delay": 37}
    never = {"sift": {"sift_delay": "auto"}, "keep": {"achieved_after_delay": None, "target": 0.5, "sift_started_at": None}}
    assert random_keep_changes(never)["keep_fraction"] == 1.0  # the sifted run never sifted: neither does its control
