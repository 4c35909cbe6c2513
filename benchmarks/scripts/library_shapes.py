"""The library in the code people already have: each published shape beside the plain class it replaces.

Runs every shape the library promises to fit, on a tiny BERT or linear model (offline, seconds each), and the same run
with the plain Hugging Face ``Trainer`` / Lightning / accelerate / ``DataLoader``, and prints one row per run: optimizer
steps run and planned, rows offered and kept, evaluations, the learning rate at the end, and what else was checked
(accelerate's sync on an epoch's last micro-batch, the epochs a peeking loop counts). Then the exact-resume checks (a
``SiftingTrainer``, also with gradient accumulation and a padding collator, and an accelerate script with
``save_state``/``load_state``, stopped mid-epoch and resumed, end with the uninterrupted run's weights) and, with
``--torchrun``, the two-process runs (``SiftingTrainer`` under ``torchrun``; Lightning DDP with the helper and with the
compat loader), each beside its plain counterpart. The accelerate, tutorial and resume shapes are the ones
``tests/test_shapes.py`` asserts on (imported from there, so the table and the tests run one code).

    python -m benchmarks library-shapes [--epochs 3] [--torchrun]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests/test_shapes.py holds the shapes' code


@dataclass
class Row:
    shape: str
    loop: str
    steps: int
    planned: int | str
    offered: int | str
    kept: float | str
    evaluations: int | str
    final_lr: float | str
    checked: str = ""


def _bert() -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                    intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _rows(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(n)]


def _args(out: str, epochs: int, **extra: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=out, per_device_train_batch_size=8, num_train_epochs=epochs, report_to=[],
                             save_strategy="no", logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0,
                             gradient_accumulation_steps=2, eval_strategy="epoch", per_device_eval_batch_size=16, **extra)


def _hf_row(shape: str, trainer: Any, loader: str | None = None) -> Row:
    """Train ``trainer`` and read the row; ``loader``: the attribute its sifting loader is at once trained (None: plain)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the logs stay in log_history; the table is the output
    out = trainer.train()
    evals = sum("eval_loss" in h for h in trainer.state.log_history)
    st = getattr(trainer, loader).stats if loader else None
    return Row(shape, "sifted" if st else "plain", out.global_step, trainer.state.max_steps,
               st.raw_samples if st else "all", round(st.kept_samples / st.raw_samples, 3) if st else 1.0,
               evals, trainer.lr_scheduler.get_last_lr()[0])


def hugging_face(epochs: int, tmp: str) -> list[Row]:
    """The plain Trainer, SiftingTrainer, the guide's simple setup (enable_sifting) and custom setup (a subclass whose
    get_train_dataloader wraps super()'s), all with gradient accumulation 2 and evaluation every epoch."""
    from transformers import Trainer

    from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader
    from siftcli.compat.smart_sifting.integrations.trainer import enable_sifting
    from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
    from siftcli.compat.smart_sifting.sift_config.sift_configs import LossConfig, RelativeProbabilisticSiftConfig, SiftingBaseConfig
    from siftcli.integrations.hf import SiftingTrainer
    from siftcli.sift import SiftConfig

    rows, held = _rows(96), _rows(16)
    config = RelativeProbabilisticSiftConfig(beta_value=1, loss_history_length=100,
                                             loss_based_sift_config=LossConfig(sift_config=SiftingBaseConfig(sift_delay=2)))

    class BertLoss(Loss):  # the published text sample's loss, on the DataLoader's own batch
        def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
            batch = {k: v.to(model.device) for k, v in original_batch.items()}
            return torch.nn.functional.cross_entropy(model(**batch).logits, batch["labels"], reduction="none")

    class SiftingImplementedTrainer(Trainer):  # the guide's custom setup, imports changed only
        def get_train_dataloader(self) -> Any:
            dl = super().get_train_dataloader()
            self.sifting = SiftingDataloader(sift_config=config, orig_dataloader=dl, loss_impl=BertLoss(), model=self.model)
            return self.sifting

    out = []
    plain = Trainer(model=_bert(), args=_args(f"{tmp}/plain", epochs), train_dataset=rows, eval_dataset=held)
    out.append(_hf_row("HF Trainer", plain))
    sifting = SiftingTrainer(model=_bert(), args=_args(f"{tmp}/st", epochs), train_dataset=rows, eval_dataset=held,
                             sift_config=SiftConfig(beta=1.0, sift_delay=2))
    out.append(_hf_row("SiftingTrainer", sifting, "sifting_loader"))
    simple = enable_sifting(Trainer(model=_bert(), args=_args(f"{tmp}/simple", epochs), train_dataset=rows, eval_dataset=held),
                            config, BertLoss())
    out.append(_hf_row("enable_sifting (guide, simple)", simple, "sifting_loader"))
    custom = SiftingImplementedTrainer(model=_bert(), args=_args(f"{tmp}/custom", epochs), train_dataset=rows,
                                       eval_dataset=held)
    out.append(_hf_row("get_train_dataloader override (guide, custom)", custom, "sifting"))
    return out


def resume_check(tmp: str) -> dict[str, Any]:
    """SiftingTrainer (probabilistic) checkpointed every step; resumed from a mid-epoch checkpoint and from the first
    epoch's last one: does each end with the uninterrupted run's weights?"""
    from transformers import TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer
    from siftcli.sift import SiftConfig

    def make(out: str) -> SiftingTrainer:
        args = TrainingArguments(output_dir=f"{tmp}/{out}", per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                                 save_strategy="steps", save_steps=1, logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0)
        return SiftingTrainer(model=_bert(), args=args, train_dataset=_rows(64), sift_config=SiftConfig(beta=1.0, sift_delay=2, seed=1))

    from transformers.trainer_callback import PrinterCallback

    whole = make("whole")
    whole.remove_callback(PrinterCallback)
    whole.train()
    per_epoch = len(whole.sifting_loader)
    result: dict[str, Any] = {"steps": whole.state.global_step, "steps_per_epoch": per_epoch}
    for name, step in (("mid-epoch", per_epoch // 2 + 1), ("epoch boundary", per_epoch)):
        resumed = make(f"resumed-{step}")
        resumed.remove_callback(PrinterCallback)
        resumed.train(resume_from_checkpoint=f"{tmp}/whole/checkpoint-{step}")
        a, b = whole.model.state_dict(), resumed.model.state_dict()
        result[f"{name} (checkpoint-{step})"] = all(torch.equal(a[k], b[k]) for k in a)
    return result


def accelerate_and_tutorial() -> list[Row]:
    """accelerate's ``nlp_example.py`` shape (prepare, a linear schedule planned from ``len()``, ``accumulate``) with
    gradient accumulation 1 and 2, and the PyTorch DDP tutorial's loop (``sampler.set_epoch``, a peek at the first
    batch), each plain and sifted."""
    from tests.test_shapes import accelerate_loop, ddp_tutorial

    out = []
    for accumulation in (1, 2):
        for sifted in (False, True):
            r = accelerate_loop(sifted, accumulation)
            out.append(Row(f"accelerate nlp_example, accumulation {accumulation}", "sifted" if sifted else "plain", r["steps"],
                           r["planned"], r["offered"], r["kept"], "-", round(r["lr"], 9),
                           f"last micro-batch synced {sum(r['last_synced'])}/{len(r['last_synced'])}"))
    for sifted in (False, True):
        r = ddp_tutorial(peek=True, sifted=sifted)
        loader = r["loader"]
        st = loader.stats if loader is not None else None
        out.append(Row("DDP tutorial (set_epoch, peek), 1 process", "sifted" if sifted else "plain", r["steps"], "-",
                       st.raw_samples if st else "all", round(st.kept_samples / st.raw_samples, 3) if st else 1.0, "-", "-",
                       f"{loader.epoch} epochs counted" if loader is not None else "4 epochs"))
    return out


def more_resumes(tmp: str) -> dict[str, Any]:
    """The Trainer with gradient accumulation 2 and a padding collator resumed from checkpoint-4 (mid-epoch), and the
    no-Trainer accelerate script resumed with ``load_state`` mid-epoch: steps, final LR, evaluations, weights."""
    from transformers.trainer_callback import PrinterCallback

    from tests.test_shapes import no_trainer, padded_trainer

    whole = padded_trainer(Path(tmp), "padded-whole")
    resumed = padded_trainer(Path(tmp), "padded-resumed")
    for trainer in (whole, resumed):
        trainer.remove_callback(PrinterCallback)
    whole.train()
    resumed.train(resume_from_checkpoint=f"{tmp}/padded-whole/checkpoint-4")
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    evals = [[h["step"] for h in t.state.log_history if "eval_loss" in h] for t in (whole, resumed)]
    out: dict[str, Any] = {"trainer, accumulation 2, padding collator, checkpoint-4": {
        "steps": [whole.state.global_step, resumed.state.global_step],
        "final_lr": [whole.lr_scheduler.get_last_lr()[0], resumed.lr_scheduler.get_last_lr()[0]],
        "evaluations": evals, "weights_equal": all(torch.equal(a[k], b[k]) for k in a)}}
    for sifted in (False, True):
        full = no_trainer(Path(tmp) / f"nt-whole-{sifted}", sifted=sifted)
        stop = full["planned"] // 3 + 1
        no_trainer(Path(tmp) / f"nt-{sifted}", stop_at=stop, sifted=sifted)
        again = no_trainer(Path(tmp) / f"nt-{sifted}", resume=True, sifted=sifted)
        out[f"accelerate no-Trainer script ({'sifted' if sifted else 'plain'}), save_state at step {stop}"] = {
            "steps": [full["steps"], again["steps"]], "planned": full["planned"], "final_lr": [full["lr"], again["lr"]],
            "weights_equal": all(torch.equal(x, y) for x, y in zip(full["weights"], again["weights"], strict=True))}
    return out


def lightning(epochs: int, tmp: str) -> list[Row]:
    """A plain LightningModule; the same with sifting_dataloader + SiftedTrainingStep; the tutorial's DataModule shape;
    the smart-sifting Lightning test script's shape (compat loader in a DataModule, TrainingMetricsRecorder). Each with a
    linear learning-rate decay stepped every optimizer step and validation every epoch."""
    import lightning.pytorch as L

    from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader
    from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
    from siftcli.compat.smart_sifting.metrics.lightning import TrainingMetricsRecorder
    from siftcli.compat.smart_sifting.sift_config.sift_configs import LossConfig, RelativeProbabilisticSiftConfig, SiftingBaseConfig
    from siftcli.integrations.lightning import SiftedTrainingStep, sifting_dataloader
    from siftcli.sift import SiftConfig, cross_entropy_loss

    x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x[:, 0] > 0).long())

    class Plain(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(4, 2)
            self.validated = 0
            self.sifted: Any = None

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            return self.net(inputs)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

        def train_dataloader(self) -> Any:
            return DataLoader(data, batch_size=8, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(data, batch_size=64)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

        def on_validation_epoch_end(self) -> None:
            self.validated += 0 if self.trainer.sanity_checking else 1

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            steps = self.trainer.estimated_stepping_batches
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class Sifted(SiftedTrainingStep, Plain):
        def train_dataloader(self) -> Any:
            return sifting_dataloader(self, DataLoader(data, batch_size=8, shuffle=True), SiftConfig(beta=1.0), cross_entropy_loss)

    class Tutorial(SiftedTrainingStep, Plain):  # the DataModule owns train_dataloader
        pass

    class TutorialData(L.LightningDataModule):
        def train_dataloader(self) -> Any:
            return sifting_dataloader(self, DataLoader(data, batch_size=8, shuffle=True), SiftConfig(beta=1.0), cross_entropy_loss)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(data, batch_size=64)

    class CELoss(Loss):
        def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(original_batch[0]), original_batch[1], reduction="none")

    class SageMakerData(L.LightningDataModule):  # the smart-sifting Lightning test script's shape
        def __init__(self, model: L.LightningModule) -> None:
            super().__init__()
            self.model = model

        def train_dataloader(self) -> Any:
            config = RelativeProbabilisticSiftConfig(beta_value=1, loss_history_length=100,  # the default delay (1,000
                                                     loss_based_sift_config=LossConfig(  # batches) outlasts this run
                                                         sift_config=SiftingBaseConfig(sift_delay=2)))
            self.model.sifted = SiftingDataloader(sift_config=config,
                                                  orig_dataloader=DataLoader(data, batch_size=8, shuffle=True),
                                                  loss_impl=CELoss(), model=self.model)
            return self.model.sifted

        def val_dataloader(self) -> DataLoader:
            return DataLoader(data, batch_size=64)

    out = []
    for shape, module, datamodule, callbacks in (
            ("LightningModule", Plain(), None, []),
            ("LightningModule + sifting_dataloader", Sifted(), None, []),
            ("DataModule (Lightning tutorial shape)", Tutorial(), TutorialData(), []),
            ("compat DataModule + TrainingMetricsRecorder", Plain(), "sagemaker", [TrainingMetricsRecorder()])):
        L.seed_everything(0, verbose=False)
        dm = SageMakerData(module) if datamodule == "sagemaker" else datamodule
        trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                            default_root_dir=f"{tmp}/{len(out)}")
        trainer.fit(module, dm) if dm is not None else trainer.fit(module)
        st = module.sifted.stats if module.sifted is not None else None
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        out.append(Row(shape, "sifted" if st else "plain", trainer.global_step, trainer.estimated_stepping_batches,
                       st.raw_samples if st else "all", round(st.kept_samples / st.raw_samples, 3) if st else 1.0,
                       module.validated, round(lr, 6)))
    return out


def more_shapes(tmp: str) -> list[Row]:
    """The shapes added since the first table, from the code ``tests/test_shapes.py`` asserts on: Lightning's step
    limits (``limit_train_batches`` as a count and a fraction, ``max_steps`` without ``max_epochs``), the docs' first
    example (a hand-written loop planning its schedule from ``len()``; also with ``exact_len=False``, the shape the
    default was changed for), streamed data under the Trainer with ``max_steps``; each beside its plain counterpart."""
    from tests.test_shapes import first_example, lightning_run, stream_trainer

    out = []
    for limits in ({"max_epochs": 3, "limit_train_batches": 5}, {"max_epochs": 3, "limit_train_batches": 0.5},
                   {"max_steps": 20}):
        name = "Lightning " + ", ".join(f"{k}={v}" for k, v in limits.items())
        for sifted in (False, True):
            r = lightning_run(sifted, **limits)
            out.append(Row(name, "sifted" if sifted else "plain", r["steps"], r["planned"], "-", "-", r["validations"],
                           round(r["lr"], 6), f"steps per epoch {list(r['per_epoch'].values())}"))
    for label, kwargs in (("plain", {"sifted": False}), ("sifted", {}), ("sifted, exact_len=False", {"exact_len": False})):
        r = first_example("fresh", **kwargs)
        out.append(Row("a loop planning its schedule from len() (docs' first example)", label, r["steps"], r["planned"],
                       r["offered"], round(r["kept"], 3), "-", round(r["lr"], 6), f"steps per epoch {r['per_epoch']}"))
    for sifted in (False, True):
        trainer = stream_trainer(Path(tmp) / f"stream-{sifted}", sifted=sifted)
        kept = [h["sift_kept_fraction"] for h in trainer.state.log_history if "sift_kept_fraction" in h]
        out.append(Row("HF Trainer over a stream (IterableDataset), max_steps=20", "sifted" if sifted else "plain",
                       trainer.state.global_step, trainer.state.max_steps, "-", round(kept[-1], 3) if kept else 1.0, "-",
                       trainer.lr_scheduler.get_last_lr()[0]))
    out += sentence_transformers_rows(tmp) + optional_rows(tmp)
    return out


def sentence_transformers_rows(tmp: str) -> list[Row]:
    """sentence-transformers' trainer with ``MultipleNegativesRankingLoss`` and ``NO_DUPLICATES``: plain, through
    ``SiftingSentenceTransformerTrainer``, and sifted with the packing's no-repeat rule off (the loader before it)."""
    from tests.test_shapes import st_run

    out = []
    for label, kwargs in (("plain", {"sifted": False}), ("sifted", {}), ("sifted, no-repeat packing off", {"distinct": False})):
        r = st_run(Path(tmp) / f"st-{len(out)}", **kwargs)
        out.append(Row("sentence-transformers, MultipleNegativesRankingLoss, NO_DUPLICATES", label, r["steps"], r["planned"],
                       "-", round(r["kept"], 3), "-", r["lr"], f"batches repeating a text: {r['repeats']} of {r['batches']}"))
    from tests.test_shapes import trl_run

    for sifted in (False, True):
        r = trl_run(Path(tmp) / f"trl-{sifted}", sifted=sifted)
        out.append(Row("TRL SFTTrainer, prompt/completion", "sifted" if sifted else "plain", r["steps"], r["planned"], "-",
                       round(r["kept"], 3), "-", r["lr"], f"mean_token_accuracy logged at {len(r['accuracy'])} steps"))
    return out


def optional_rows(tmp: str) -> list[Row]:
    """timm's train.py and Composer's resume, where each library is installed (neither sits beside the dev install's
    torch: run this module in an environment that has it); a row saying so otherwise."""
    import importlib.util

    out = []
    if importlib.util.find_spec("timm") is None:
        out.append(Row("timm train.py", "-", 0, "-", "-", "-", "-", "-", "timm not installed here"))
    else:
        from tests.test_shapes import timm_run

        for prefetcher in (True, False):
            for sifted in (False, True):
                r = timm_run(sifted, prefetcher)
                off = 2 * r["per_epoch"]
                out.append(Row(f"timm train.py ({'prefetcher, FastCollateMixup' if prefetcher else 'no prefetcher, Mixup'}, "
                               "drop_last, mixup_off_epoch=2)", "sifted" if sifted else "plain", r["steps"], r["planned"],
                               "-", "-", "-", round(r["lr"], 6), f"batch sizes {sorted(set(r['sizes']))}; mixed batches "
                               f"{sum(r['mixed'][:off])} of {off} before, {sum(r['mixed'][off:])} of "
                               f"{len(r['mixed']) - off} after"))
    if importlib.util.find_spec("composer") is None:
        out.append(Row("Composer Trainer, resumed at batch 10", "-", 0, "-", "-", "-", "-", "-", "Composer not installed here"))
    else:
        from tests.test_shapes import composer_run

        whole = composer_run(Path(tmp) / "composer-whole")
        composer_run(Path(tmp) / "composer-cut", stop="10ba")
        resumed = composer_run(Path(tmp) / "composer-cut", load=True)
        out.append(Row("Composer Trainer (SiftingCallback, spin_dataloaders=False), resumed at batch 10", "sifted", 0, "-",
                       "-", "-", "-", "-", "weights equal to the uninterrupted run: "
                       f"{all(torch.equal(a, b) for a, b in zip(whole, resumed, strict=True))}"))
    return out


def fabric_resumes(tmp: str) -> dict[str, Any]:
    """Lightning Fabric (``setup_dataloaders``, then the wrap; ``fabric.save``/``load`` with the loader in the state),
    stopped at step 10 and resumed in a loader made afresh: weights equal to the uninterrupted run's."""
    from tests.test_shapes import fabric_run

    out = {}
    for scoring in ("fresh", "memory"):
        folder = Path(tmp) / f"fabric-{scoring}"
        folder.mkdir()
        whole, steps = fabric_run(folder, scoring)
        fabric_run(folder, scoring, stop=10)
        resumed, again = fabric_run(folder, scoring, load=True)
        out[f"Lightning Fabric, {scoring} scoring, fabric.save at step 10"] = {
            "steps": [steps, again], "weights_equal": all(torch.equal(a, b) for a, b in zip(whole, resumed, strict=True))}
    from tests.test_shapes import st_run, trl_run

    for name, run in (("sentence-transformers", st_run), ("TRL SFTTrainer", trl_run)):
        whole = run(Path(tmp) / f"{name}-whole")
        run(Path(tmp) / f"{name}-cut", stop=10)
        resumed = run(Path(tmp) / f"{name}-cut", resume=True)
        out[f"{name}, checkpoint at step 10, resume_from_checkpoint"] = {
            "steps": [whole["steps"], resumed["steps"]],
            "weights_equal": all(torch.equal(a, b) for a, b in zip(whole["weights"], resumed["weights"], strict=True))}
    return out


def torchrun_rows(tmp: str) -> list[Row]:
    """tests/dist_hf_trainer.py and tests/dist_lightning.py on 2 processes (gloo), sifted and plain."""
    env = {**os.environ, "SIFTCLI_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    out = []
    for script, mode, shape in (("dist_hf_trainer.py", "plain", "HF Trainer, torchrun x2"),
                                ("dist_hf_trainer.py", "probabilistic", "SiftingTrainer, torchrun x2"),
                                ("dist_lightning.py", "plain", "Lightning DDP x2 (DataModule)"),
                                ("dist_lightning.py", "probabilistic", "Lightning DDP x2 (DataModule)"),
                                ("dist_lightning.py", "compat", "Lightning DDP x2 (compat SiftingDataloader)")):
        cwd = Path(tempfile.mkdtemp(dir=tmp))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(ROOT / "tests" / script), mode]
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise SystemExit(f"{script} {mode} failed:\n{done.stderr[-2000:]}")
        r = json.loads((cwd / "rank0.json").read_text())
        sifted = mode != "plain"
        out.append(Row(shape, "sifted" if sifted else "plain", r["steps"], r.get("planned", "-"), r.get("raw", len(r.get("rows", []))),
                       round(r["kept"] / r["raw"], 3) if sifted and "kept" in r else (1.0 if not sifted else "-"),
                       r.get("validated", "-"), r.get("lr", "-")))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks library-shapes", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--torchrun", action="store_true", help="also the 2-process runs (about a minute each)")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = hugging_face(opts.epochs, tmp) + lightning(opts.epochs, tmp) + accelerate_and_tutorial() + more_shapes(tmp)
        if opts.torchrun:
            rows += torchrun_rows(tmp)
        resume = resume_check(tmp)
        more = {**more_resumes(tmp), **fabric_resumes(tmp)}
    print("| shape | loader | steps | planned | rows offered (rank 0) | kept | evaluations | final LR | also checked |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.shape} | {r.loop} | {r.steps} | {r.planned} | {r.offered} | {r.kept} | {r.evaluations} | {r.final_lr} "
              f"| {r.checked} |")
    print()
    print("exact resume (SiftingTrainer, probabilistic, weights equal to the uninterrupted run):", json.dumps(resume))
    for name, r in more.items():
        print(f"resume, {name}:", json.dumps(r))


if __name__ == "__main__":
    main()
