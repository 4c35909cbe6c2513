"""``siftcli filter --report``: one row per input row saying why it was kept or removed, readable by the tools people
use, consistent with the rows written, and bad report paths refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from siftcli.cli import app
from siftcli.commands import run_filter
from siftcli.curate.engines import Engine
from siftcli.errors import SiftcliError
from tests.test_curate import REFERENCES, _pool, _recipe


def _with_ids(folder: Path) -> None:
    """The pool with an ``id`` column (a document id) and a ``source`` group column."""
    import pandas as pd

    pool = pd.read_csv(folder / "pool.csv")
    pool.insert(0, "id", [f"doc-{i:04d}" for i in range(len(pool))])
    pool["source"] = ["web" if i % 3 else "books" for i in range(len(pool))]
    pool.to_csv(folder / "pool.csv", index=False)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_report_says_why_for_every_row_and_agrees_with_the_rows_written(tmp_path: Path, suffix: str) -> None:
    import pandas as pd

    folder = _pool(tmp_path)
    _with_ids(folder)
    recipe = _recipe(folder, **{**REFERENCES[0], "sift.reference.holdout_source": str(folder / "target.csv"),
                                "data.id_column": "id", "data.group_column": "source"})
    report = tmp_path / f"why{suffix}"
    got = run_filter(recipe, 0.5, str(tmp_path / "kept.csv"), 0.7, engine=Engine(workers=1), report=str(report))
    table = pd.read_parquet(report) if suffix == ".parquet" else pd.read_json(report, lines=True)
    kept_rows = pd.read_csv(tmp_path / "kept.csv")
    assert len(table) == got.of and table["row"].is_unique  # one row per pool row
    assert table["kept"].sum() == got.kept and set(table.loc[table.kept, "id"]) == set(kept_rows["id"])
    assert (table.loc[table.kept, "reason"] == "kept").all()
    copies = table[table.reason == "near-copy"]
    assert len(copies) == got.of - got.dedup_kept > 0
    assert (copies["similarity"] >= 0.0).all() and copies["representative"].notna().all()
    assert set(copies["representative"]) <= set(table.loc[table.reason != "near-copy", "row"])  # a survivor of dedup
    assert (copies["cluster"] == copies["representative"]).all()
    cut = table["cut"].iloc[0]
    assert (table.loc[table.reason == "below-cut", "score"] >= cut).all() and (table.loc[table.kept, "score"] <= cut).all()
    assert got.summary is not None and got.summary.reasons == table["reason"].value_counts().to_dict() | {
        r: 0 for r in ("kept", "near-copy", "below-cut") if r not in set(table["reason"])}
    assert sum(c.size for c in got.summary.clusters) <= got.of and got.summary.clusters[0].sample
    assert set(got.summary.kept_by_group) == {"books", "web"}
    assert sum(got.summary.histogram.counts) == got.of - len(copies)
    assert Path(got.summary.plot).exists() if got.summary.plot else True


def test_the_parquet_report_opens_in_datasets_and_duckdb_where_installed(tmp_path: Path) -> None:
    import datasets

    folder = _pool(tmp_path)
    recipe = _recipe(folder)
    report = tmp_path / "why.parquet"
    got = run_filter(recipe, None, str(tmp_path / "kept.csv"), 0.7, engine=Engine(workers=1), report=str(report))
    rows = datasets.load_dataset("parquet", data_files=str(report), split="train")
    assert len(rows) == got.of and set(rows.column_names) >= {"row", "kept", "reason", "similarity", "cluster"}
    assert rows.filter(lambda r: r["kept"]).num_rows == got.kept
    assert all(r is None for r in rows["score"])  # no --keep: no scores, no cut
    import pandas as pd

    assert (pd.read_parquet(report).query("reason == 'near-copy'").shape[0]) == got.of - got.kept
    try:
        import duckdb
    except ImportError:
        return
    assert duckdb.sql(f"select count(*) from '{report}' where reason = 'near-copy'").fetchone()[0] == got.of - got.kept


def test_bad_report_paths_are_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = _pool(tmp_path)
    _recipe(folder)
    recipe = str(folder / "r.yaml")

    def run(*args: str) -> tuple[int, str]:
        out = CliRunner().invoke(app, ["filter", recipe, "-o", str(tmp_path / "k.csv"), "--dedup", *args])
        return out.exit_code, out.output.strip()

    for args, words in [(["--report", str(tmp_path / "k.csv")], "expected a .parquet or .jsonl"),
                        (["--report", str(folder / "pool.csv")], "expected a .parquet or .jsonl"),
                        (["--report", str(tmp_path)], "expected a .parquet or .jsonl"),
                        (["--report", str(folder / "pool.csv" / "r.parquet")], "is a file, not a folder"),
                        (["--report", str(tmp_path / "r.parquet"), "--stream"], "--stream")]:
        code, text = run(*args)
        assert code == 2 and words in text and "Traceback" not in text and len(text.splitlines()) <= 2, (args, text)
    code, text = run("--report", str(tmp_path / "new" / "folder" / "r.parquet"))  # made, as -o's folder is
    assert code == 0 and (tmp_path / "new" / "folder" / "r.parquet").exists(), text
    (tmp_path / "d.parquet").mkdir()
    code, text = run("--report", str(tmp_path / "d.parquet"))
    assert code == 2 and "is a folder" in text
    with pytest.raises(SiftcliError, match="is the output"):
        run_filter(_recipe(folder), None, str(tmp_path / "same.jsonl"), 0.7, report=str(tmp_path / "same.jsonl"))


def test_filter_report_on_the_command_line_prints_the_summary_and_json_carries_it(tmp_path: Path) -> None:
    folder = _pool(tmp_path)
    _recipe(folder, **{**REFERENCES[0], "sift.reference.holdout_source": str(folder / "target.csv")})
    args = ["filter", str(folder / "r.yaml"), "-o", str(tmp_path / "k.csv"), "--dedup", "--keep", "0.5", "--workers", "1",
            "--report", str(tmp_path / "why.parquet")]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "why: kept" in out.output and "<- cut" in out.output and "largest near-copy clusters" in out.output
    assert "kept share per label" in out.output
    js = CliRunner().invoke(app, [*args, "--json"])
    summary = json.loads(js.output)["summary"]
    assert sum(summary["reasons"].values()) == json.loads(js.output)["of"]
    assert len(summary["histogram"]["counts"]) + 1 == len(summary["histogram"]["edges"])
    assert np.isclose(sum(summary["kept_by_label"].values()) / len(summary["kept_by_label"]), 0.5, atol=0.3)
