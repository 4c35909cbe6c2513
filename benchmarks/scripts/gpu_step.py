"""What one training step costs in siftcli against a plain PyTorch loop, side by side in one process.

``python -m benchmarks gpu-step`` measures, on one device and in one run (so the ratios compare): the plain loop (the
floor: the same model, batches, padding, precision and fused AdamW, written out by hand), siftcli's baseline step,
sifted with remembered losses and with fresh scoring, each eager and compiled, the plain Hugging Face ``Trainer`` beside
``SiftingTrainer``, in ms per optimizer step with the share of the device's bf16 peak and the peak memory; then a
``siftcli compare`` with the honest arms, whose equal-time opponent must train within 3% of the seconds of the arm it is
held against. Every row starts from the same initial weights; each times a window of steady-state steps (a warm-up
first) with the device synchronised at the window's two ends only.

GPU (recipes/gpu/bert-base-config-sst2.yaml: BERT-base from config, SST-2, bf16; sized to fit 8 minutes on one H100).
A GPU machine without internet needs the data and the wheels its Python lacks, prepared here and carried::

    python -m benchmarks gpu --prepare        # .gpu-data/sst2: a copy of ../shared/data/sst2 (ignored by git)
    bash ../shared/gpu/prepare-wheels.sh       # .whl/: datasets, optuna, pydantic, ... and MiniLM's tokenizer files
    # there, from the checkout, with .whl and .gpu-data carried (the device tool's `carry`):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:$PWD/.whl/minilm:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
      && python -m benchmarks gpu-step --copy-to "$OUT"
    # back here: $OUT/section.md is the section of docs/benchmarks.md it wrote there (device named); paste it in

CPU (the default recipe: the same ratios where no GPU is at hand)::

    python -m benchmarks gpu-step --cpu

``--smoke`` runs every row on a tiny model for a few steps on the CPU (a test runs it). Each row is printed as it lands
(the table's header first); ``--minutes N`` (8 on a GPU unless given) shrinks the timed window once the plain loop's
step is known, so the whole run fits by its own estimate, printed then; ``--output DIR`` is the run folder (default
runs/gpu-step under the folder the command is started from, never the checkout's). The table's columns say what a
compiled row did: compile seconds, compilations after the start (0 is the aim) and eager fallbacks (frames that failed
to compile and ran eagerly: such a row is not compiled).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import write_section
from benchmarks.entry import ROOT
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe

GPU_RECIPE = ROOT / "recipes" / "gpu" / "bert-base-config-sst2.yaml"
CPU_RECIPE = ROOT / "recipes" / "default.yaml"
#: The run folder (``--output``; ``None``: runs/gpu-step under the folder the command is started from).
OUT: Path | None = None
#: Rows of the GPU run: 16,384 training sentences (256 raw batches of 64 an epoch) and 872 for evaluation.
GPU_SIZE = ["data.max_train_samples=16384", "data.max_eval_samples=872", "num_workers=4"]
SMOKE = ["device=cpu", "precision=fp32", "num_workers=0", "batch_size=8", "eval.batch_size=64",
         "data.max_train_samples=160", "data.max_eval_samples=64", "max_length=16",
         'model.config_overrides={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
         '"intermediate_size": 64}']
#: Dense bf16 tensor-core peaks (FLOP/s) by device name, for the share of peak; a device not listed shows none.
BF16_PEAK = {"H100 80GB HBM3": 989e12, "H100 SXM": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H200": 989e12,
             "A100": 312e12, "L4": 121e12, "A10G": 70e12}


@dataclass
class Row:
    """One measured configuration: ms per optimizer step over the window, per raw batch read (sifted rows read more
    batches than they train on), what it kept and what scoring cost, the share of the bf16 peak and the peak memory."""

    name: str
    ms_step: float
    ms_raw_batch: float
    kept: float = 1.0
    scoring_share: float = 0.0
    compile_seconds: float | None = None
    steady_compilations: int | None = None
    eager_fallbacks: int | None = None  # compiled frames that failed and ran eagerly: a "compiled" row that is not
    peak_share: float | None = None
    peak_mb: float | None = None
    note: str = ""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def _peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in BF16_PEAK.items() if k in name), None)


class Window:
    """Times steps ``start`` (the first after the warm-up) to ``start + steps`` of a loop, synchronising the device at
    those two steps only; ``raw`` (raw samples read) and ``trained`` at both ends give what a sifted window read."""

    def __init__(self, device: torch.device, start: int, steps: int) -> None:
        self.device, self.start, self.steps = device, start, steps
        self.t0 = self.t1 = 0.0
        self.raw = [0, 0]
        self.trained = [0, 0]

    def at(self, step: int, raw: int = 0, trained: int = 0) -> bool:
        """Call after each optimizer step (1-based); True once the window is complete."""
        if step == self.start:
            _sync(self.device)
            self.t0, self.raw[0], self.trained[0] = time.perf_counter(), raw, trained
        elif step == self.start + self.steps:
            _sync(self.device)
            self.t1, self.raw[1], self.trained[1] = time.perf_counter(), raw, trained
            return True
        return False

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def _batches(workload: Any, recipe: Recipe, device: torch.device) -> Any:
    from torch.utils.data import DataLoader

    from siftcli.training.setup import SeededSampler

    return DataLoader(workload.train_data, batch_size=recipe.batch_size, collate_fn=workload.collate,
                      sampler=SeededSampler(len(workload.train_data), recipe.seed), num_workers=recipe.num_workers,
                      pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(recipe.seed))


def plain_loop(workload: Any, recipe: Recipe, warmup: int, steps: int, compiled: bool = False) -> tuple[Row, float]:
    """The floor: the same model, batches (the workload's collate: the same padding), precision and fused AdamW, in
    the loop everyone writes. Returns its row and the mean tokens per step (for the FLOP count)."""
    from siftcli.sift.precision import autocast
    from siftcli.training import compiling
    from siftcli.training.setup import make_optimizer

    device = workload.device
    model = workload.model.to(device).train()
    before = compiling.counts()
    forward = compiling.compile_module(model, recipe.compile_mode) if compiled else model  # as siftcli compiles
    optimizer = make_optimizer(model, recipe.optim.lr, recipe.optim.weight_decay)
    window, tokens, step = Window(device, warmup, steps), 0, 0
    _reset_memory(device)
    while True:
        for batch in _batches(workload, recipe, device):
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            labels = batch.pop("labels")
            with autocast(device, recipe.precision):
                logits = forward(**batch).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
            loss.backward()
            if recipe.optim.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.optim.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step > warmup:
                tokens += int(batch["input_ids"].numel()) if "input_ids" in batch else 0
            if window.at(step):
                ms = 1000 * window.seconds / steps
                row = Row("plain PyTorch loop" + (", compiled" if compiled else ""), ms, ms, peak_mb=_peak_mb(device),
                          eager_fallbacks=int(compiling.since(before)["eager_fallbacks"]) if compiled else None)
                return row, tokens / steps


def siftcli_run(workload: Any, recipe: Recipe, name: str, warmup: int, steps: int, sift: dict[str, Any] | None) -> Row:
    """``siftcli train`` through its loop (:func:`siftcli.training.loop.train`) with the window read from its events."""
    from siftcli.training.loop import train
    from siftcli.training.setup import sift_config

    r = recipe.model_copy(update={"max_steps": warmup + steps + 1, "epochs": 1000.0, "log_every_steps": 10**9,
                                  "eval": recipe.eval.model_copy(update={"every_steps": None, "every_seconds": None,
                                                                         "per_epoch": False})})
    cfg = sift_config(r, len(workload.train_data), **sift) if sift is not None else None
    window = Window(workload.device, warmup, steps)

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind in ("step", "tick"):
            window.at(data["step"], data["raw_samples"], data["trained_samples"])

    _reset_memory(workload.device)
    out = train(workload, r, cfg, on_event=on_event)
    raw = (window.raw[1] - window.raw[0]) / max(1, r.batch_size)
    phases, clock = out["phases"], max(1e-9, out["train_seconds"])
    compile_info = out.get("compile") or {}
    return Row(name, 1000 * window.seconds / steps, 1000 * window.seconds / max(1e-9, raw),
               kept=(window.trained[1] - window.trained[0]) / max(1, window.raw[1] - window.raw[0]),
               scoring_share=phases.get("scoring", 0.0) / clock, compile_seconds=compile_info.get("seconds"),
               steady_compilations=compile_info.get("steady_compilations"), peak_mb=_peak_mb(workload.device),
               eager_fallbacks=compile_info.get("eager_fallbacks"))


def trainer_run(workload: Any, recipe: Recipe, name: str, warmup: int, steps: int, sifted: bool) -> Row:
    """The Hugging Face ``Trainer`` (or ``SiftingTrainer``) on the same rows and collate, timed by a callback."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer
    from siftcli.sift.sifter import SiftConfig

    device = workload.device
    window = Window(device, warmup, steps)

    class Timer(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            window.at(state.global_step)

    folder = OUT / "trainer"
    args = TrainingArguments(output_dir=str(folder), per_device_train_batch_size=recipe.batch_size,
                             max_steps=warmup + steps + 1, learning_rate=recipe.optim.lr, report_to=[],
                             save_strategy="no", logging_strategy="no", eval_strategy="no", disable_tqdm=True,
                             bf16=recipe.precision == "bf16", use_cpu=device.type == "cpu",
                             dataloader_num_workers=recipe.num_workers, optim="adamw_torch_fused",
                             max_grad_norm=recipe.optim.grad_clip or 0.0, remove_unused_columns=False)
    kwargs: dict[str, Any] = {"model": workload.model, "args": args, "train_dataset": workload.train_data,
                              "data_collator": workload.collate, "callbacks": [Timer()]}
    if sifted:
        kwargs["sift_config"] = SiftConfig(beta=1.0, scoring="memory", seed=recipe.seed)
    _reset_memory(device)
    trainer = (SiftingTrainer if sifted else Trainer)(**kwargs)
    trainer.train()
    shutil.rmtree(folder, ignore_errors=True)
    ms = 1000 * window.seconds / steps
    if not sifted:
        return Row(name, ms, ms, peak_mb=_peak_mb(device))
    stats = trainer.sifting_loader.stats  # the whole run's kept fraction: the window is not told apart here
    kept = stats.kept_samples / max(1, stats.raw_samples)
    return Row(name, ms, ms * kept, kept=kept, scoring_share=float("nan"), peak_mb=_peak_mb(device),
               note="kept over the whole run")


def compare_rows(recipe: Recipe, folder: Path) -> tuple[list[str], dict[str, Any]]:
    """``siftcli compare`` with the honest arms, one seed: each arm's seconds and the equal-time opponent's ratio."""
    from siftcli.commands import run_compare

    if folder.exists():
        shutil.rmtree(folder)
    _, result = run_compare(recipe, output=str(folder), seeds=1, arms=["baseline", "sifted", "equal-time", "random-keep"],
                            pilot=False)
    runs, pair = result["runs"][0], result["pairs"][0]
    lines = ["| arm | training s | steps | accuracy % |", "|---|---:|---:|---:|"]
    for arm, m in runs.items():
        lines.append(f"| {arm} | {m['train_seconds']:.1f} | {m['optimizer_steps']} | "
                     f"{100 * m['final'].get('accuracy', float('nan')):.2f} |")
    return lines, pair.get("equal_time") or {}


def fit_steps(minutes: float, spent: float, plain_ms: float, warmup: int, steps: int, rows_left: int,
              compare_steps: int) -> tuple[int, float]:
    """The window's steps for the rows still to run so that the whole run fits ``minutes`` (never fewer than 20), and
    the estimate in minutes: each row costs its warm-up and window at up to twice the plain step (sifted rows read
    more raw batches) plus 20 s of setup (a compiled row's compile is inside the setup on a GPU's small model and
    counted again in the margin), and the compare trains four arms over ``compare_steps`` steps each."""
    def estimate(n: int) -> float:
        per_row = 20.0 + (warmup + n) * 2 * plain_ms / 1000
        return (spent + rows_left * per_row + 4 * compare_steps * 2 * plain_ms / 1000) / 60
    while steps > 20 and estimate(steps) > minutes:
        steps = max(20, int(steps * 0.8))
    return steps, estimate(steps)


def measure(recipe: Recipe, warmup: int, steps: int, *, compiled: bool, trainer: bool,
            on_row: Any = None, minutes: float | None = None, compare_steps: int = 0) -> tuple[list[Row], float]:
    """Every row, each from the same initial weights; returns the rows and the plain loop's tokens per step.
    ``on_row(row, plain_ms)`` is called as each row lands; ``minutes``: the window of the rows after the plain loop is
    sized (:func:`fit_steps`) so that the whole run fits."""
    t0 = time.perf_counter()
    on_row = on_row or (lambda row, plain_ms: None)
    from siftcli.workload.build import build_workload

    if recipe.pad_to_multiple_of is None:  # every row pads as a compiled one must: the plain loop's batches are the same
        recipe = recipe.model_copy(update={"pad_to_multiple_of": 16})
    workload = build_workload(recipe)
    initial = copy.deepcopy(workload.model.state_dict())

    def fresh() -> Any:
        workload.model.load_state_dict(initial)
        return workload

    rows: list[Row] = []
    plain, tokens = plain_loop(fresh(), recipe, warmup, steps)
    rows.append(plain)
    on_row(plain, plain.ms_step)
    eager = recipe.model_copy(update={"compile": False})
    memory = {"scoring": "memory", "sift_delay": 0, "mode": "probabilistic", "beta": 1.0}
    fresh_scores = {"scoring": "fresh", "sift_delay": 0, "mode": "probabilistic", "beta": 1.0}
    # sifted windows start after an epoch: remembered losses then decide, as in the steady state of a run
    epoch_steps = -(-len(workload.train_data) // recipe.batch_size)
    later = max(warmup, epoch_steps // 2 + warmup)
    runs: list[tuple[str, Recipe, int, dict[str, Any] | None]] = [
        ("siftcli baseline", eager, warmup, None), ("siftcli sifted, remembered losses", eager, later, memory),
        ("siftcli sifted, fresh scoring", eager, warmup, fresh_scores)]
    if compiled:
        on = recipe.model_copy(update={"compile": True})
        runs += [("siftcli baseline, compiled", on, warmup, None),
                 ("siftcli sifted, remembered losses, compiled", on, later, memory)]
    if minutes:
        left = len(runs) + int(compiled) + 2 * int(trainer)
        steps, estimate = fit_steps(minutes, time.perf_counter() - t0, plain.ms_step, warmup, steps, left, compare_steps)
        print(f"# {steps} timed steps a row from here: about {estimate:.1f} min in all by this run's estimate "
              f"(--minutes {minutes:g})", flush=True)

    def add(row: Row) -> None:
        rows.append(row)
        on_row(row, plain.ms_step)

    for name, r, start, sift in runs:
        add(siftcli_run(fresh(), r, name, start, steps, sift))
    if compiled:
        add(plain_loop(fresh(), recipe, warmup, steps, compiled=True)[0])
    if trainer:
        add(trainer_run(fresh(), recipe, "Hugging Face Trainer", warmup, steps, sifted=False))
        add(trainer_run(fresh(), recipe, "SiftingTrainer (remembered losses)", warmup, steps, sifted=True))
    peak = _peak_flops(workload.device)
    if peak:
        params = sum(p.numel() for p in workload.model.parameters())
        for row in rows:  # 6 N per token per optimizer step (forward 2N, backward 4N); sifted rows train fewer tokens
            row.peak_share = 6 * params * tokens / (row.ms_step / 1000) / peak
    return rows, tokens


def table(rows: list[Row], plain_ms: float) -> list[str]:
    return TABLE_HEAD + [table_row(r, plain_ms) for r in rows]


TABLE_HEAD = ["| configuration | ms / step | × plain | ms / raw batch | kept | scoring share | bound a + s + 0.03 | "
              "compile s | steady compilations | eager fallbacks | bf16 peak | peak MB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def table_row(r: Row, plain_ms: float) -> str:
    """One row of the table (printed as it lands, and in the section)."""
    sifted = r.kept < 0.999
    bound = f"{r.kept + r.scoring_share + 0.03:.2f} ({r.ms_raw_batch / plain_ms:.2f})" \
        if sifted and r.scoring_share == r.scoring_share else "—"
    return (f"| {r.name} | {r.ms_step:.1f} | {r.ms_step / plain_ms:.2f} | {r.ms_raw_batch:.1f} | {r.kept:.2f} | "
            f"{'—' if r.scoring_share != r.scoring_share else f'{r.scoring_share:.2f}'} | {bound} | "
            f"{'—' if r.compile_seconds is None else f'{r.compile_seconds:.1f}'} | "
            f"{'—' if r.steady_compilations is None else r.steady_compilations} | "
            f"{'—' if r.eager_fallbacks is None else r.eager_fallbacks} | "
            f"{'—' if r.peak_share is None else f'{100 * r.peak_share:.0f}%'} | "
            f"{'—' if r.peak_mb is None else f'{r.peak_mb:.0f}'} |")


def _smoke_data() -> list[str]:
    """A few hundred made-up sentences in the GPU recipe's columns, so ``--smoke`` needs no data copied in."""
    import random

    rng = random.Random(0)
    good, bad = ["good", "great", "lovely", "fine", "superb"], ["bad", "awful", "dull", "poor", "ugly"]
    folder = OUT / "smoke-data"
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.tsv", 240), ("dev.tsv", 64)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randint(0, 1)
            words = [rng.choice(good if label else bad)] + [rng.choice(good + bad) for _ in range(rng.randint(0, 6))]
            lines.append(" ".join(words) + f"\t{label}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return [f"data.source={folder / 'train.tsv'}", f"data.eval_source={folder / 'dev.tsv'}"]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu} ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu-step", description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="the default recipe on this CPU (the same ratios, no GPU)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model for a few steps on the CPU: checks the script")
    parser.add_argument("--recipe", help="another recipe (its overrides with --set)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--warmup", type=int, help="steps before the window (default 30; smoke 3)")
    parser.add_argument("--steps", type=int, help="steps in the window (default 200 on a GPU, 40 on a CPU; smoke 4)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument("--no-trainer", action="store_true", help="skip the Hugging Face Trainer rows")
    parser.add_argument("--no-compare", action="store_true", help="skip the siftcli compare")
    parser.add_argument("--copy-to", help="also copy the results here (the device tool's $OUT)")
    parser.add_argument("--output", help="the run folder for results.json and the rows' scratch (default runs/gpu-step "
                                         "under the folder it is started from)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="fit the whole run in about this many minutes: the timed window shrinks (to 20 steps at "
                             "least) by an estimate from the plain loop's step (default on a GPU: 8)")
    parser.add_argument("--seeds", type=int, default=1, help="accepted for the harness; the step rows run once")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args(argv)
    global OUT
    OUT = Path(args.output).resolve() if args.output else OUT or Path.cwd() / "runs" / "gpu-step"  # never the checkout
    os.chdir(ROOT)  # the recipes name .gpu-data/ relative to the repo root
    smoke, cpu = args.smoke, args.cpu or args.smoke
    path = Path(args.recipe) if args.recipe else (GPU_RECIPE if not cpu or smoke else CPU_RECIPE)
    sets = (SMOKE if smoke else ["device=cpu"] if cpu else GPU_SIZE) + list(args.set)
    if smoke:
        sets = _smoke_data() + sets
    elif path == GPU_RECIPE and not (ROOT / ".gpu-data" / "sst2" / "train.tsv").exists():
        parser.error(".gpu-data/sst2 is missing: run python -m benchmarks gpu --prepare first (and carry .gpu-data)")
    recipe = load_recipe(path, sets)
    warmup = args.warmup or (3 if smoke else 30)
    steps = args.steps or (4 if smoke else 40 if cpu else 200)
    t0 = time.perf_counter()
    minutes_budget = args.minutes if args.minutes is not None else (None if cpu else 8.0)
    compare_steps = 0 if args.no_compare else int(recipe.epochs * -(-(recipe.data.max_train_samples or 0) // recipe.batch_size))
    print("\n".join(TABLE_HEAD), flush=True)
    rows, tokens = measure(recipe, warmup, steps, compiled=not args.no_compile and (not cpu or smoke),
                           trainer=not args.no_trainer, on_row=lambda row, plain_ms: print(table_row(row, plain_ms), flush=True),
                           minutes=minutes_budget, compare_steps=compare_steps)
    device = torch.device(recipe.device if recipe.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu")
    lines = table(rows, rows[0].ms_step)
    held: dict[str, Any] = {}
    compare_lines: list[str] = []
    if not args.no_compare:
        small = recipe.model_copy(update={"epochs": 1.0 if smoke else recipe.epochs})
        compare_lines, held = compare_rows(small, OUT / "compare")
    minutes = (time.perf_counter() - t0) / 60
    name = device_name(device)
    heading = f"## {'Step cost on a CPU' if cpu and not smoke else 'Step cost on a GPU'}: siftcli against a plain loop"
    command = "python -m benchmarks gpu-step" + (" --cpu" if cpu and not smoke else "") + (" --smoke" if smoke else "")
    section = [heading, "", f"`{command}` on {name}, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, recipe "
               f"`{path.relative_to(ROOT)}` ({recipe.batch_size} a batch, {recipe.precision}, about {tokens:.0f} tokens a "
               f"step), {warmup} warm-up steps then {steps} timed, {minutes:.1f} min in all. Rows run one after another in "
               "one process from the same initial weights; × plain is against the first row. A sifted row trains fewer "
               "rows per raw batch: its ms per raw batch over the plain step should stay within a + s + 0.03 (a: kept, "
               "s: scoring's share of its clock).", "", *lines, ""]
    if compare_lines:
        ratio = held.get("ratio")
        section += [f"`siftcli compare` (baseline, sifted, equal-time, random-keep; one seed) on the same recipe: the "
                    f"equal-time opponent trained {held.get('train_seconds', float('nan')):.1f} s of the "
                    f"{held.get('budget_seconds', float('nan')):.1f} s it was given"
                    + (f" ({ratio:.3f}{'' if held.get('within_3_percent') else ', off by more than 3%'})." if ratio else "."),
                    "", *compare_lines, ""]
    print("\n".join(section))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps({"device": name, "rows": [asdict(r) for r in rows], "equal_time": held,
                                                  "tokens_per_step": tokens, "warmup": warmup, "steps": steps}, indent=1))
    if args.copy_to:
        shutil.copytree(OUT, Path(args.copy_to) / OUT.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("compare"))
        (Path(args.copy_to) / "section.md").write_text("\n".join(section) + "\n")
    if not smoke:
        write_section(Path(args.out), heading.split(":")[0], section)
    return 0

