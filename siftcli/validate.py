"""``siftcli validate``: resolve what can be resolved (data columns, model) without training."""

from __future__ import annotations

from siftcli.config import Recipe


def validate_recipe_sources(recipe: Recipe) -> list[str]:
    """Load the data and the model config; raise :class:`SiftcliError` on the first problem."""
    from siftcli.builders import splits_from_recipe
    from siftcli.models import resolve_source

    splits = splits_from_recipe(recipe)
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
