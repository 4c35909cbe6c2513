"""Run by tests/test_parallel.py under torchrun: SiftingTrainer on 2 processes (``plain``: the plain Trainer, for
``python -m benchmarks library-shapes``); writes rank<N>.json in the working folder (a file per rank: two ranks
printing to one pipe can interleave their lines)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from transformers import Trainer, TrainingArguments  # noqa: E402

from siftcli.integrations.hf import SiftingTrainer  # noqa: E402
from siftcli.sift import SiftConfig  # noqa: E402
from tests.test_integrations import _tiny_bert_and_rows  # noqa: E402

model, rows = _tiny_bert_and_rows(96)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                         save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True, ddp_backend="gloo")
if sys.argv[1] == "plain":
    trainer = Trainer(model=model, args=args, train_dataset=rows)
else:
    trainer = SiftingTrainer(model=model, args=args, train_dataset=rows,
                             sift_config=SiftConfig(beta=1.0, sift_delay=2, mode=sys.argv[1], scoring="memory"))
out = trainer.train()
loader = getattr(trainer, "sifting_loader", None)
raw, kept = (loader.stats.raw_samples, loader.stats.kept_samples) if loader else (96, 96)  # plain: 48 rows a rank, 2 epochs
weights = hashlib.sha1(b"".join(p.detach().numpy().tobytes() for p in trainer.model.parameters())).hexdigest()
Path(f"rank{dist.get_rank()}.json").write_text(json.dumps({
    "rank": dist.get_rank(), "steps": out.global_step, "raw": raw, "kept": kept, "weights": weights,
    "indices": bool(loader and loader.indices.available), "planned": trainer.state.max_steps,
    "lr": trainer.lr_scheduler.get_last_lr()[0], "peak_lr": args.learning_rate}))
dist.barrier()
dist.destroy_process_group()  # leave the group before exit: a gloo thread alive at interpreter shutdown can abort
os._exit(0)  # and skip the interpreter's finalisation, where gloo's threads now and then abort all the same
