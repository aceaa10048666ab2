"""The figures mechanism: the ``figures`` fixture writes what tests recorded, and
``guarantees_figures.py`` renders it into the guarantees page's table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import guarantees_figures as gf
import pytest
from _figures import Figures, read_figures, write_figures

TESTS = Path(__file__).resolve().parents[1]


def entry(figures, *, outcome="passed", date="2026-12-01T10:00:00Z", commit="abc1234def"):
    return {"outcome": outcome, "figures": figures, "date": date, "commit": commit, "dirty": False}


ROW = gf.Row(
    "Worker crash",
    "tests/faults/test_x.py",
    "test_kill",
    "Kills a worker.",
    (("jobs_checked", "jobs checked"), ("reclaim_s", "slowest reclaim"), ("lost", "jobs lost")),
)


def test_figures_record_validates_names_and_values():
    figures = Figures()
    figures.record(jobs_checked=10, reclaim_s=1.23456789, engine="memory", ok=True)
    figures.add(jobs_checked=5)
    figures.add(new_counter=2)
    assert figures.values == {
        "jobs_checked": 15,
        "reclaim_s": 1.234568,
        "engine": "memory",
        "ok": 1,
        "new_counter": 2,
    }
    for bad in ({"Bad": 1}, {"x-y": 1}):
        with pytest.raises(ValueError, match="lower_snake_case"):
            figures.record(**bad)
    with pytest.raises(ValueError, match="finite"):
        figures.record(x=math.nan)
    for value in ([1], None, "x" * 201):
        with pytest.raises(TypeError):
            figures.record(x=value)
    with pytest.raises(TypeError, match="not a number"):
        figures.add(engine=1)


def test_figures_file_merges_runs_and_keeps_other_tests(tmp_path):
    path = tmp_path / "deep" / "last-run.json"
    write_figures(path, {"a::t1": entry({"n": 1}), "a::t2": entry({"n": 2})})
    write_figures(path, {"a::t2": entry({"n": 20}, outcome="failed"), "a::t3": entry({"n": 3})})
    tests = read_figures(path)
    assert {node: e["figures"]["n"] for node, e in tests.items()} == {
        "a::t1": 1,
        "a::t2": 20,
        "a::t3": 3,
    }
    assert tests["a::t2"]["outcome"] == "failed"
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []
    assert read_figures(tmp_path / "missing.json") == {}
    (tmp_path / "other.json").write_text('{"format": 99, "tests": {}}')
    with pytest.raises(ValueError, match="format"):
        read_figures(tmp_path / "other.json")


SAMPLE = textwrap.dedent(
    """
    import pytest

    def test_passes(figures):
        figures.record(jobs_checked=3, lost=0)

    def test_fails(figures):
        figures.record(jobs_checked=1)
        assert False

    def test_skipped(figures):
        pytest.skip("not here")

    def test_without_figures():
        pass
    """
)


def run_pytest(directory: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "ALKSTORE_FIGURES_FILE"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "_figures", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env={**environ, "PYTHONPATH": str(TESTS), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_figures_fixture_writes_passed_and_failed_tests_not_skipped_ones(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "figures.json"
    result = run_pytest(tmp_path, env={"ALKSTORE_FIGURES_FILE": str(out)})
    assert result.returncode == 1, result.stdout + result.stderr  # test_fails failed
    tests = read_figures(out)
    assert sorted(tests) == ["test_sample.py::test_fails", "test_sample.py::test_passes"]
    passed, failed = tests["test_sample.py::test_passes"], tests["test_sample.py::test_fails"]
    assert (passed["outcome"], passed["figures"]) == ("passed", {"jobs_checked": 3, "lost": 0})
    assert (failed["outcome"], failed["figures"]) == ("failed", {"jobs_checked": 1})
    assert passed["date"].endswith("Z")
    assert "commit" in passed


def test_figures_are_written_only_when_asked_for(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    result = run_pytest(tmp_path, env={})
    assert result.returncode == 1, result.stdout + result.stderr
    assert not (tmp_path / ".figures").exists()
    result = run_pytest(tmp_path, "--figures", env={})
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(read_figures(tmp_path / ".figures" / "last-run.json")) == [
        "test_sample.py::test_fails",
        "test_sample.py::test_passes",
    ]


def test_render_a_row_with_its_figures_result_and_run():
    line = gf.render_row(
        ROW,
        [
            (
                "tests/faults/test_x.py::test_kill",
                entry({"jobs_checked": 10000, "reclaim_s": 3.456, "lost": 0, "extra": 9}),
            )
        ],
    )
    assert line == (
        "| Worker crash | [`test_x.py::test_kill`](../../tests/faults/test_x.py) | Kills a "
        "worker. | jobs checked 10,000, slowest reclaim 3.46 s, jobs lost 0 | passed | "
        "2026-12-01 10:00 UTC, `abc1234def` |"
    )


def test_render_sums_counts_and_takes_the_maximum_of_measures_per_group():
    row = gf.Row("Hostile input", "tests/security/test_y.py", None, "Abuse.", split_by="engine")
    y = "tests/security/test_y.py::"
    matching = [
        (y + "test_a[memory]", entry({"engine": "memory", "invalid_inputs": 40})),
        (y + "test_a[postgres]", entry({"engine": "postgres", "invalid_inputs": 38})),
        (y + "test_b[memory]", entry({"engine": "memory", "invalid_inputs": 2, "took_s": 1.5})),
        (y + "test_c[memory]", entry({"engine": "memory", "took_s": 0.5}, outcome="failed")),
        (y + "test_d", entry({"engine": "none", "invalid_inputs": 1})),
    ]
    assert gf.render_numbers(row, matching) == (
        "memory: invalid inputs 42, took 1.5 s; postgres: invalid inputs 38; "
        "no engine reached: invalid inputs 1"
    )
    assert gf.render_result(matching) == "**failed** (1 of 5)"
    assert gf.render_result(matching[:2]) == "passed (2 of 2)"
    assert row.matches("tests/security/test_y.py::anything")
    assert not ROW.matches("tests/faults/test_x.py::test_kill_other")
    assert ROW.matches("tests/faults/test_x.py::test_kill[p1]")


def test_regenerate_replaces_the_block_and_keeps_rows_it_has_no_figures_for():
    page = f"# Title\n\ntext\n\n{gf.BEGIN}\n| old |\n{gf.END}\n\nafter\n"
    node = f"{gf.ROWS[0].node_prefix}"
    new = gf.regenerate(page, {node: entry({"jobs_checked": 8, "lost": 0})})
    head, block, tail = gf.split_page(new)
    assert head == f"# Title\n\ntext\n\n{gf.BEGIN}"
    assert tail == f"{gf.END}\n\nafter\n"
    assert gf.table_test_cells(new) == [gf.link_cell(row) for row in gf.ROWS]
    first = gf.old_rows(block)[gf.link_cell(gf.ROWS[0])]
    assert "jobs checked 8" in first
    assert "| passed |" in first
    slow = next(row for row in gf.ROWS if row.slow)
    assert "slow, run by hand" in gf.old_rows(block)[gf.link_cell(slow)]

    # A later run without that test keeps its row; --drop-missing does not.
    other = gf.regenerate(new, {"tests/elsewhere.py::t": entry({"n": 1})})
    assert gf.old_rows(gf.split_page(other)[1])[gf.link_cell(gf.ROWS[0])] == first
    dropped = gf.regenerate(new, {}, keep=False)
    assert "not in the last run" in gf.old_rows(gf.split_page(dropped)[1])[gf.link_cell(gf.ROWS[0])]
    assert gf.unmatched({"tests/elsewhere.py::t": {}, node: {}}) == ["tests/elsewhere.py::t"]
    with pytest.raises(ValueError, match="block"):
        gf.split_page("no markers")


def test_the_script_writes_the_page_and_checks_it(tmp_path):
    figures = tmp_path / "figures.json"
    figures.write_text(
        json.dumps({"format": 1, "tests": {gf.ROWS[0].node_prefix: entry({"lost": 0})}})
    )
    page = tmp_path / "page.md"
    page.write_text(f"x\n{gf.BEGIN}\n{gf.END}\n")
    args = ["--figures", str(figures), "--page", str(page)]
    assert gf.main([*args, "--check"]) == 1
    assert gf.main(args) == 0
    assert "jobs lost 0" in page.read_text()
    assert gf.main([*args, "--check"]) == 0
    assert gf.main(["--figures", str(tmp_path / "none.json"), "--page", str(page)]) == 1
