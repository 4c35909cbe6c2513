"""``siftcli validate``: resolve what can be resolved (data columns, model) without training."""

from __future__ import annotations

from siftcli.config import Recipe


def validate_recipe_sources(recipe: Recipe) -> list[str]:
    """Load the data and the model config; raise :class:`SiftcliError` on the first problem."""
    from siftcli.data import load_splits
    from siftcli.models import resolve_source

    d = recipe.data
    splits = load_splits(
        d.source, task=recipe.task, fmt=d.format, config_name=d.config_name, train_split=d.train_split,
        eval_split=d.eval_split, eval_source=d.eval_source, eval_fraction=d.eval_fraction,
        text_column=d.text_column, text_pair_column=d.text_pair_column, image_column=d.image_column,
        label_column=d.label_column, label_names=d.label_names, column_names=d.column_names,
        max_train_samples=d.max_train_samples, max_eval_samples=d.max_eval_samples, seed=recipe.seed,
    )
    lines = [f"[green]ok[/green] data: {len(splits.train)} train / {len(splits.eval)} eval rows"
             + (f", labels {splits.label_names}" if splits.label_names else "")]
    if recipe.model.source.startswith("config:"):
        lines.append(f"[green]ok[/green] model: built from config {recipe.model.source[7:]!r} (random init)")
    else:
        from transformers import AutoConfig

        from siftcli.errors import SiftcliError
        from siftcli.models import _hub_error

        path = resolve_source(recipe.model.source)
        try:
            cfg = AutoConfig.from_pretrained(path, revision=recipe.model.revision)
        except SiftcliError:
            raise
        except Exception as exc:
            raise _hub_error("model", recipe.model.source, exc, "model.source") from None
        lines.append(f"[green]ok[/green] model: {recipe.model.source} ({cfg.model_type})")
    return lines
