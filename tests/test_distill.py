"""Distillation with sifting: the KD loss, a teacher that runs once per kept sample, bad teachers, saved students."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from siftcli.commands import run_train
from siftcli.recipe.schema import validate_recipe
from siftcli.training.distill import TeacherCache, kd_loss
from siftcli.training.setup import save_model
from siftcli.workload.build import build_workload
from siftcli.workload.models import build_model
from tests.conftest import TINY_BERT, tiny_recipe_dict

runner = CliRunner()


def test_kd_loss_matches_a_hand_computation() -> None:
    s = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    t = torch.tensor([[1.0, 1.0], [0.0, 3.0]])
    y = torch.tensor([0, 0])
    T, a = 2.0, 0.25
    import math

    def softmax(row: list[float]) -> list[float]:
        e = [math.exp(x / T) for x in row]
        return [x / sum(e) for x in e]

    expected = []
    for si, ti, yi in zip(s.tolist(), t.tolist(), y.tolist()):
        ce = -math.log(math.exp(si[yi]) / sum(math.exp(x) for x in si))
        ps, pt = softmax(si), softmax(ti)
        kl = sum(p * math.log(p / q) for p, q in zip(pt, ps))
        expected.append((1 - a) * ce + a * T * T * kl)
    assert torch.allclose(kd_loss(s, t, y, T, a), torch.tensor(expected), atol=1e-6)
    assert torch.allclose(kd_loss(s, s, y, T, 1.0), torch.zeros(2), atol=1e-6)  # a student equal to its teacher


@pytest.fixture
def teacher_dir(tmp_path: Path, text_csv: Path) -> Path:
    """A tiny classifier saved like a finished siftcli run's model (with its tokenizer)."""
    folder = tmp_path / "teacher"
    save_model(build_workload(validate_recipe(tiny_recipe_dict(text_csv, seed=7))), folder)
    return folder


def test_the_teacher_runs_once_per_kept_sample_and_never_on_dropped_ones(tmp_path: Path, text_csv: Path,
                                                                         teacher_dir: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, distill={"teacher": str(teacher_dir), "temperature": 2.0, "alpha": 0.5,
                                                                 "cache": False},
                                              **{"sift.beta": 2.0, "sift.sift_delay": 2}))
    workload = build_workload(recipe)
    seen: list[int] = []
    workload.teacher.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    frozen = {k: v.clone() for k, v in workload.teacher.state_dict().items()}
    _, m = run_train(recipe, output=str(tmp_path / "run"), workload=workload)
    assert sum(seen) == m["samples_teacher"] == m["samples_trained"] < m["raw_samples"]
    assert m["phases"]["teacher"] > 0
    assert all(torch.equal(v, workload.teacher.state_dict()[k]) for k, v in frozen.items())  # never trained
    assert not workload.teacher.training


def test_bad_teachers_are_one_line(tmp_path: Path, text_csv: Path, teacher_dir: Path) -> None:
    def check(distill: dict, expected: str) -> None:
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv, distill=distill)))
        result = runner.invoke(app, ["validate", str(path)])
        text = result.output.strip()
        assert result.exit_code == 2 and len(text.splitlines()) == 1 and "Traceback" not in text, text
        assert expected in text, text

    empty = tmp_path / "empty"
    empty.mkdir()
    check({"teacher": str(empty)}, "is not a model (no config.json")
    check({"teacher": str(teacher_dir), "temperature": 0}, "key 'distill.temperature'")
    check({"teacher": str(teacher_dir), "alpha": 1.5}, "key 'distill.alpha'")
    three = tmp_path / "three"
    w = build_workload(validate_recipe(tiny_recipe_dict(text_csv)))
    w.model.config.num_labels = 3
    w.model.classifier = torch.nn.Linear(16, 3)
    w.model.config.id2label = {0: "a", 1: "b", 2: "c"}
    w.model.config.label2id = {"a": 0, "b": 1, "c": 2}
    save_model(w, three)
    check({"teacher": str(three)}, "predicts 3 classes but the data has 2")
    small = tmp_path / "small"
    build_model("text-classification", "config:bert", num_labels=2, label_names=["0", "1"],
                config_overrides={**TINY_BERT, "vocab_size": 100}).save_pretrained(small)  # no tokenizer: only sizes compare
    check({"teacher": str(small)}, "has 100 token embeddings but the student's tokenizer has")


def test_a_saved_student_reloads_with_identical_predictions(tmp_path: Path, text_csv: Path, teacher_dir: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=1, distill={"teacher": str(teacher_dir)}))
    workload = build_workload(recipe)
    run_dir, _ = run_train(recipe, output=str(tmp_path / "run"), workload=workload)
    reloaded = AutoModelForSequenceClassification.from_pretrained(run_dir / "model").eval()
    batch = workload.collate(workload.eval_data)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, workload.model.eval()(**inputs).logits)


def test_the_cache_runs_the_teacher_once_per_sample_and_trains_as_without_it(tmp_path: Path, text_csv: Path,
                                                                           teacher_dir: Path) -> None:
    weights = {}
    counts = {}
    for cache in (False, True):
        recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=3, distill={"teacher": str(teacher_dir), "cache": cache},
                                                  **{"sift.enabled": False}))
        workload = build_workload(recipe)
        seen: list[int] = []
        workload.teacher.register_forward_hook(lambda m, a, k, out, seen=seen: seen.append(k["input_ids"].shape[0]), with_kwargs=True)
        _, m = run_train(recipe, output=str(tmp_path / f"run-{cache}"), workload=workload, sift=False)
        weights[cache] = {k: v.clone() for k, v in workload.model.state_dict().items()}
        counts[cache] = (sum(seen), m["samples_teacher"], m["samples_trained"], len(workload.train_data))
        assert m["teacher"] == {"cached": cache, "inputs_change": False}  # for the verdict
    assert counts[False][0] == counts[False][1] == counts[False][2] == 3 * counts[False][3]  # every sample, every epoch
    assert counts[True][0] == counts[True][1] == counts[True][3]  # each sample once
    # the same training: the cached outputs are the teacher's own (up to float error from other batch shapes)
    assert all(torch.allclose(weights[False][k], weights[True][k], atol=1e-5) for k in weights[False])


def test_cache_keeps_outputs_exactly_top_k_keeps_the_mass_and_large_caches_spill_to_a_file(tmp_path: Path) -> None:
    log_p = torch.log_softmax(torch.randn(6, 10), dim=-1)
    idx = torch.tensor([5, 1, 3, 0, 2, 4])
    full = TeacherCache(6, 10)
    full.put(idx, log_p)
    assert torch.equal(full.get(idx), log_p) and bool(full.lookup(idx).all())
    top = TeacherCache(6, 10, top_k=3)
    top.put(idx, log_p)
    got = top.get(idx)
    assert torch.allclose(got.exp().sum(-1), torch.ones(6), atol=1e-5)  # a distribution still
    best = log_p.topk(3, dim=-1)
    assert torch.allclose(got.gather(1, best.indices), best.values)  # the top k exact
    spilled = TeacherCache(6, 10, memory_bytes=16, spill_dir=tmp_path)
    spilled.put(idx[:3], log_p[:3])
    assert spilled.spilled is not None and spilled.spilled.exists() and torch.equal(spilled.get(idx[:3]), log_p[:3])
    again = TeacherCache(6, 10)
    again.load_state_dict(full.state_dict())  # a resumed run keeps its cache
    assert torch.equal(again.get(idx), log_p)


def test_uncertainty_scores_need_no_label() -> None:
    from siftcli.sift.losses import Uncertainty

    model = torch.nn.Identity()
    logits = torch.tensor([[0.0, 0.0], [10.0, -10.0]])
    entropy = Uncertainty("entropy")(model, (logits,))
    margin = Uncertainty("margin")(model, (logits,))
    assert entropy[0] == pytest.approx(0.6931, abs=1e-4) and entropy[1] < 1e-6  # unsure vs sure
    assert margin[0] == pytest.approx(1.0) and margin[1] == pytest.approx(0.0, abs=1e-6)


def test_an_unlabelled_pool_distils_with_the_students_uncertainty(tmp_path: Path, text_csv: Path, teacher_dir: Path) -> None:
    from tests.conftest import make_text_rows

    pool = tmp_path / "pool.csv"
    pool.write_text("text\n" + "\n".join(t for t, _ in make_text_rows(120, seed=3)) + "\n")  # no label column at all
    distill = {"teacher": str(teacher_dir), "alpha": 1.0}
    recipe = validate_recipe(tiny_recipe_dict(pool, distill=distill, **{
        "data.eval_source": str(text_csv), "data.label_names": ["0", "1"], "sift.score": "entropy", "sift.beta": 2.0}))
    workload = build_workload(recipe)
    assert workload.unlabeled and all(r["labels"] == -1 for r in workload.train_data)
    _, m = run_train(recipe, output=str(tmp_path / "run"), workload=workload)
    assert m["status"] == "completed" and m["samples_scored"] > 0 and m["samples_trained"] < m["raw_samples"]
    assert m["samples_teacher"] <= m["samples_trained"]  # the teacher ran on kept samples only (once each, cached)
    assert 0.0 <= m["final"]["accuracy"] <= 1.0
    with pytest.raises(Exception, match="has no 'label' column, so its loss cannot rank samples"):
        build_workload(validate_recipe(tiny_recipe_dict(pool, distill=distill, **{"data.eval_source": str(text_csv)})))
    with pytest.raises(Exception, match="column 'label' not found in the train data"):  # without distillation: labels needed
        build_workload(validate_recipe(tiny_recipe_dict(pool, **{"data.eval_source": str(text_csv)})))


def test_a_teacher_fraction_runs_the_teacher_on_the_unsure_share_and_the_rest_trains_on_labels(
        tmp_path: Path, text_csv: Path, teacher_dir: Path) -> None:
    from siftcli.sift.losses import uncertainty
    from siftcli.training.distill import distill_loss, kd_loss

    spec = {"teacher": str(teacher_dir), "cache": False, "teacher_fraction": 0.25, "teacher_beta": 50.0}
    recipe = validate_recipe(tiny_recipe_dict(text_csv, distill=spec, **{"sift.enabled": False}))
    workload = build_workload(recipe)
    loss = distill_loss(recipe.distill, workload, torch.device("cpu"), None, seed=3)
    batch = workload.collate([workload.train_data[i] for i in range(16)])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    taught: list[int] = []
    workload.teacher.register_forward_hook(lambda m, a, k, out: taught.append(k["input_ids"].shape[0]), with_kwargs=True)
    model = workload.model.eval()
    for _ in range(3):  # the first batch fills the gate's history; later ones rank against it
        out = loss(model, batch)
    assert taught == [4, 4, 4] and loss.samples == 12  # exactly a quarter of each batch, never the rest
    with torch.no_grad():
        logits = model(**inputs).logits
        teacher = workload.teacher(**inputs).logits
    ce = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
    kd = kd_loss(logits, teacher, batch["labels"], recipe.distill.temperature, recipe.distill.alpha)
    is_kd = torch.isclose(out, kd, atol=1e-5) & ~torch.isclose(out, ce, atol=1e-5)
    assert int(is_kd.sum()) == 4 and torch.allclose(out[~is_kd], ce[~is_kd], atol=1e-5)
    unsure = uncertainty(logits)  # a steep preference (beta 50): the taught rows are among the most unsure
    assert unsure[is_kd].min() >= unsure.kthvalue(16 - 8).values
    state = loss.state_dict()
    again = distill_loss(recipe.distill, workload, torch.device("cpu"), None, seed=3)
    again.load_state_dict(state)  # resume: the gate's history and generator come back
    assert torch.equal(again(model, batch), loss(model, batch))


def test_a_random_teacher_fraction_is_the_control_and_alpha_one_is_refused(tmp_path: Path, text_csv: Path,
                                                                           teacher_dir: Path) -> None:
    spec = {"teacher": str(teacher_dir), "teacher_fraction": 0.5, "teacher_score": "random", "cache": False}
    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=2, distill=spec, **{"sift.enabled": False}))
    _, m = run_train(recipe, output=str(tmp_path / "run"), sift=False)
    assert m["samples_trained"] == m["raw_samples"]  # every sample trains...
    assert abs(m["samples_teacher"] - m["samples_trained"] / 2) <= 1  # ...half of them with the teacher
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv, distill={**spec, "alpha": 1.0})))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "teacher_fraction with alpha 1" in result.output
    assert len(result.output.strip().splitlines()) == 1
    path.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv, distill={**spec, "teacher_beta": float("inf")})))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "distill.teacher_beta" in result.output  # refused in the recipe, not mid-run
    assert len(result.output.strip().splitlines()) == 1


def test_compare_measures_a_teacher_fraction_against_plain_distillation(tmp_path: Path, text_csv: Path,
                                                                        teacher_dir: Path) -> None:
    import json

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv, epochs=1, distill={"teacher": str(teacher_dir), "cache": False},
                                                    **{"sift.enabled": False, "eval.every_steps": None})))
    gate = "variant:distill.teacher_fraction=0.5"
    result = CliRunner().invoke(app, ["compare", str(path), "--arm", gate, "--arm", "variant:distill=", "-o",
                                      str(tmp_path / "cmp"), "-q"])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    runs = out["runs"][0]
    assert list(runs) == ["baseline", gate, "variant:distill="] and out["pairs"][0]["subject"] == gate  # no sifted arm
    assert runs["baseline"]["samples_teacher"] == runs["baseline"]["samples_trained"]
    assert abs(runs[gate]["samples_teacher"] - runs[gate]["samples_trained"] / 2) <= 1
    assert not runs["variant:distill="].get("samples_teacher")  # labels alone: no teacher
    assert "variant:distill=" in out["pairs"][0]["vs"]
    assert "enable sifting" not in out["verdict"]  # the subject is a teacher fraction, not a sifting run
