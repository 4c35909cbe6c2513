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
    return lines
