"""``siftcli validate``: everything that can be checked without training, so a recipe that validates also trains."""

from __future__ import annotations

from siftcli.config import Recipe


def validate_recipe_sources(recipe: Recipe) -> list[str]:
    """Build the whole workload (data, labels, tokenizer, model, loss) and the device; raise on the first problem."""
    from siftcli.builders import build_workload, resolve_device

    resolve_device(recipe.device, recipe.precision)
    workload = build_workload(recipe)
    lines = [f"[green]ok[/green] data: {len(workload.train_data)} train / {len(workload.eval_data)} eval rows"
             + (f", labels {workload.label_names}" if workload.label_names else "")
             + (f", {int(workload.noisy.sum())} training labels flipped (data.label_noise)" if workload.noisy is not None else "")]
    kind = "built from config (random init)" if recipe.model.source.startswith("config:") else "loaded"
    n_params = sum(p.numel() for p in workload.model.parameters())
    lines.append(f"[green]ok[/green] model: {recipe.model.source} {kind}, {workload.model.config.model_type}, {n_params:,} parameters")
    if ":" in recipe.loss:
        lines.append(_try_loss(recipe.loss, workload))
    return lines


def _try_loss(spec: str, workload: object) -> str:
    """Name the code a recipe imports (a recipe is trusted like code) and call it once on two training samples, so a
    loss whose signature binds but which fails inside fails here, not after the run folder exists."""
    import importlib

    import torch

    from siftcli.errors import SiftcliError, first_line

    module = importlib.import_module(spec.partition(":")[0])
    where = getattr(module, "__file__", None) or "a built-in module"
    batch = workload.collate(workload.train_data[:2])
    workload.model.eval()
    try:
        with torch.no_grad():
            out = workload.loss_fn(workload.model, batch)
    except Exception as exc:
        first = first_line(exc, 160, empty="")
        raise SiftcliError(f"loss: {spec} raised {exc.__class__.__name__} on a batch of 2 training samples: {first}") from None
    finally:
        workload.model.train()
    if not isinstance(out, torch.Tensor) or out.numel() != 2:
        got = f"a tensor of {out.numel()} values" if isinstance(out, torch.Tensor) else type(out).__name__
        raise SiftcliError(f"loss: {spec} returned {got} for a batch of 2 samples; expected Tensor[n], one loss per sample")
    return (f"[green]ok[/green] code: loss {spec} from {where} (imported and run on 2 samples; a recipe that names "
            "code is trusted like code)")
