"""docs/reference/configuration.md agrees with the code (issue 6), so the page cannot rot.

Each table of the page is preceded by an invisible marker naming what it documents:

- ``<!-- config: DOTTED.NAME [DOTTED.NAME ...] [keyword-only] -->``: a function, a class
  (its constructor) or a dataclass. Its rows must be exactly its parameters (fields),
  leaving out ``self``, ``task_status`` and ``*args``/``**kwargs`` (with
  ``keyword-only``, only the keyword-only ones), and each row's *default* must be the
  code's: ``required`` for none, else the first code span, read as a Python literal or,
  failing that, as a name of the target's module (``REGISTRY``). An optional *CLI*
  column names the ``alkstore-trio worker`` option that sets the same thing; its
  default must be the same.
- ``<!-- config: cli COMMAND[, COMMAND...] -->`` and ``<!-- config: cli-by-command -->``
  (a *command* column): options of ``alkstore-trio`` subcommands. Each default is
  checked against the argument parser: ``off`` for a flag, ``required``, or a literal;
  a ``$VARIABLE`` span says the option defaults to that environment variable, which is
  checked too. Together the tables must cover every option of every subcommand.
- ``<!-- config: env -->``: exactly the environment variables the package reads.
- ``<!-- config: metrics DOTTED.NAME -->``: every metric a Prometheus collector of
  ``alkstore_trio.contrib.prometheus`` exports, as a scrape names it (``_total`` on a
  counter), with its type, its labels and, for a histogram, its series' suffixes. The
  real ones are read from the collectors themselves: each is created on a fresh
  ``CollectorRegistry`` over an in-memory store, fed (a worker acks a job; the store is
  read with a job in a queue) so that every labelled series exists, and collected.

Nothing runs in a subprocess here: the page is compared with the imported code.
:func:`test_the_check_catches_a_page_that_drifted` proves the comparison can fail.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from prometheus_client import CollectorRegistry

from alkstore_trio import Job, Worker, open_store
from alkstore_trio._cli import build_parser
from alkstore_trio.contrib.prometheus import StoreStatsMetrics, WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
PACKAGE = ROOT / "alkstore_trio"

MARKER = re.compile(r"^<!-- config: (?P<spec>.+?) -->\n\n(?P<table>(?:\|.*\n)+)", re.MULTILINE)
SPAN = re.compile(r"`([^`]+)`")
#: A value each documented environment variable may take, to check it reaches the parser.
ENV_SAMPLES = {"ALKSTORE_DSN": "postgresql://someone@db.example/jobs", "ALKSTORE_SCHEMA": "s1"}
#: Parameters that are plumbing, not settings.
SKIPPED_PARAMETERS = frozenset({"self", "task_status"})
REQUIRED = object()


@dataclass
class Table:
    spec: str
    line: int
    rows: list[dict[str, str]]

    def where(self, row: dict[str, str]) -> str:
        first = next(iter(row.values()))
        return f"configuration.md line {self.line} ({self.spec}), row {first}"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_tables(text: str) -> list[Table]:
    tables = []
    for match in MARKER.finditer(text):
        header, _, *lines = match["table"].splitlines()
        names = [name.lower() for name in _cells(header)]
        rows = [dict(zip(names, _cells(line), strict=True)) for line in lines]
        tables.append(Table(match["spec"], text.count("\n", 0, match.start()) + 1, rows))
    return tables


def _spans(cell: str) -> list[str]:
    return SPAN.findall(cell)


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not dotted.startswith(exc.name):
                raise  # a dependency is missing, not a module of this name
            continue
        for attr in parts[cut:]:
            target = getattr(target, attr)
        return target
    raise AssertionError(f"cannot import {dotted}")


def _parameters(target: Any, *, keyword_only: bool) -> dict[str, Any]:
    """Name -> default (``REQUIRED`` when there is none) of a callable or dataclass."""
    if dataclasses.is_dataclass(target):
        return {
            field.name: (REQUIRED if field.default is dataclasses.MISSING else field.default)
            for field in dataclasses.fields(target)
        }
    skipped_kinds = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    return {
        name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for name, p in inspect.signature(target).parameters.items()
        if name not in SKIPPED_PARAMETERS
        and p.kind not in skipped_kinds
        and (not keyword_only or p.kind is inspect.Parameter.KEYWORD_ONLY)
    }


def _documented(cell: str, namespace: dict[str, Any]) -> Any:
    """The default a *default* cell of an API table states."""
    if cell.startswith("required"):
        return REQUIRED
    spans = _spans(cell)
    assert spans, f"no default in {cell!r}: write required or the value in backticks"
    try:
        return ast.literal_eval(spans[0])
    except (ValueError, SyntaxError):
        return namespace[spans[0]]


def _same(documented: Any, actual: Any) -> bool:
    if documented is REQUIRED or actual is REQUIRED:
        return documented is actual
    return type(documented) is type(actual) and documented == actual


@functools.cache
def _parser(environ: tuple[tuple[str, str], ...] = ()) -> argparse.ArgumentParser:
    return build_parser(environ=dict(environ))


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for word in command.split():
        (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = commands.choices[word]
    return parser


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[str]:
    """Every leaf subcommand of ``alkstore-trio`` (``dead purge``, ``worker``...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from _commands(sub, full)
                else:
                    yield full


def _api_problems(table: Table) -> list[str]:
    words = table.spec.split()
    keyword_only = "keyword-only" in words
    problems = []
    for dotted in (word for word in words if word != "keyword-only"):
        target = _resolve(dotted)
        namespace = vars(inspect.getmodule(target))
        actual = _parameters(target, keyword_only=keyword_only)
        documented = {row["option"].strip("`"): row for row in table.rows}
        for name in actual.keys() - documented.keys():
            problems.append(f"{dotted}: option {name!r} is not on the page ({table.spec})")
        for name in documented.keys() - actual.keys():
            problems.append(f"{dotted}: the page documents {name!r}, which it does not take")
        for name in actual.keys() & documented.keys():
            row = documented[name]
            stated = _documented(row["default"], namespace)
            if not _same(stated, actual[name]):
                problems.append(
                    f"{table.where(row)}: {dotted}({name}=...) defaults to "
                    f"{actual[name]!r}, the page says {row['default']!r}"
                )
            problems += _cli_twin_problems(table, row, actual[name])
    return problems


def _cli_twin_problems(table: Table, row: dict[str, str], default: Any) -> list[str]:
    """The *CLI* column: the ``worker`` option exists and has the same default."""
    flags = [span.split()[0] for span in _spans(row.get("cli", "")) if span.startswith("--")]
    problems = []
    for flag in flags:
        action = _option(_subparser(_parser(), "worker"), flag)
        if action is None:
            problems.append(f"{table.where(row)}: alkstore-trio worker has no {flag}")
        elif default is not REQUIRED and not _same(action.default, default):
            problems.append(
                f"{table.where(row)}: worker {flag} defaults to {action.default!r}, the "
                f"API to {default!r}"
            )
    return problems


def _cli_row_problems(table: Table, row: dict[str, str], command: str) -> list[str]:
    flags = [span.split()[0] for span in _spans(row["option"])]
    parser = _subparser(_parser(), command)
    action = _option(parser, flags[0])
    if action is None:
        return [f"{table.where(row)}: alkstore-trio {command} has no {flags[0]}"]
    if set(flags) != set(action.option_strings):
        return [f"{table.where(row)}: {command} spells it {action.option_strings}"]
    cell = row["default"]
    literals = [span for span in _spans(cell) if not span.startswith("$")]
    problems = []
    if cell.startswith("off"):
        if not isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            problems.append(f"{table.where(row)}: {command} {flags[0]} is not a flag")
    elif literals:
        if not _same(ast.literal_eval(literals[0]), action.default):
            problems.append(
                f"{table.where(row)}: {command} {flags[0]} defaults to {action.default!r}, "
                f"the page says {cell!r}"
            )
    elif "required" in cell:
        if not (action.required or action.default in (None, [])):
            problems.append(f"{table.where(row)}: {command} {flags[0]} has a default")
    else:
        problems.append(f"{table.where(row)}: write off, required or the default in backticks")
    for variable in (span[1:] for span in _spans(cell) if span.startswith("$")):
        sample = ENV_SAMPLES[variable]
        from_env = _option(_subparser(_parser(((variable, sample),)), command), flags[0])
        assert from_env is not None
        if from_env.default != sample:
            problems.append(f"{table.where(row)}: {command} {flags[0]} ignores ${variable}")
    return problems


def _cli_problems(tables: list[Table]) -> list[str]:
    problems = []
    covered: set[tuple[str, str]] = set()
    for table in tables:
        if table.spec == "cli-by-command":
            pairs = [(row["command"].strip("`"), row) for row in table.rows]
        elif table.spec.startswith("cli "):
            commands = [c.strip() for c in table.spec.removeprefix("cli ").split(",")]
            pairs = [(command, row) for command in commands for row in table.rows]
        else:
            continue
        for command, row in pairs:
            problems += _cli_row_problems(table, row, command)
            covered |= {(command, span.split()[0]) for span in _spans(row["option"])}
    parser = _parser()
    for command in _commands(parser):
        for action in _subparser(parser, command)._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                if (command, flag) not in covered:
                    problems.append(f"alkstore-trio {command} {flag} is not on the page")
    return problems


@functools.cache
def package_environment_variables() -> frozenset[str]:
    """The variables the package reads: ``ALKSTORE_*`` string constants, and the keys of
    ``environ.get(...)`` / ``os.getenv(...)`` calls."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"ALKSTORE_[A-Z0-9_]+", node.value):
                    names.add(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                owner_name = getattr(owner, "attr", None) or getattr(owner, "id", None)
                reads = (node.func.attr == "get" and owner_name == "environ") or (
                    node.func.attr == "getenv"
                )
                if reads and node.args and isinstance(node.args[0], ast.Constant):
                    names.add(str(node.args[0].value))
    return frozenset(names)


def _env_problems(tables: list[Table]) -> list[str]:
    (table,) = (t for t in tables if t.spec == "env")
    documented = {row["variable"].strip("`") for row in table.rows}
    read = package_environment_variables()
    return [
        f"environment variable {name} is read but not on the page" for name in read - documented
    ] + [f"the page documents {name}, which the package never reads" for name in documented - read]


#: The collectors whose metrics the ``metrics`` tables list, by their dotted name.
COLLECTORS = {
    f"{cls.__module__}.{cls.__qualname__}": cls for cls in (WorkerMetrics, StoreStatsMetrics)
}
#: The page's names are for this namespace (the default of both collectors).
DEFAULT_NAMESPACE = "alkstore"
#: Other namespaces whose names must be the page's with the prefix replaced.
OTHER_NAMESPACES = ("shop", "")
#: prometheus-client adds a ``_created`` series to the counters and histograms it keeps
#: itself (``WorkerMetrics``'), not to a custom collector's; the page says so in prose.
CREATED_SERIES = frozenset({"alkstore_trio.contrib.prometheus.WorkerMetrics"})


@dataclass(frozen=True)
class Family:
    """One metric family as collected: what a scrape shows of it."""

    type: str
    #: Label names of its samples (without a histogram's ``le``).
    labels: frozenset[str]
    #: The names of its samples (``..._total``, ``..._bucket``, ``..._created``...).
    series: frozenset[str]


def _exposed_name(name: str, kind: str) -> str:
    """The name a scrape gives a family: prometheus-client's text format (and PromQL)
    name a counter's samples ``..._total``, while the family itself is named without."""
    return f"{name}_total" if kind == "counter" else name


async def _collect(namespace: str, worker_id_label: bool) -> dict[str, dict[str, Family]]:
    async def handler(job: Job) -> None:
        return None

    registries = {dotted: CollectorRegistry() for dotted in COLLECTORS}
    async with open_store("memory://") as store:
        emails = store.queue("emails")
        await emails.enqueue(b"one")
        # Q18.7-Q18.9: a limited queue, so that the limit series exist too.
        await store.queue("limited").set_limits(max_running=5, rate_per_s=10)
        # A reading while the queue holds a row, so that its per-queue series exist.
        queue_stats = StoreStatsMetrics(
            store,
            registries["alkstore_trio.contrib.prometheus.StoreStatsMetrics"],
            namespace=namespace,
        )
        assert await queue_stats.poll()
        metrics = WorkerMetrics(
            registries["alkstore_trio.contrib.prometheus.WorkerMetrics"],
            namespace=namespace,
            worker_id_label=worker_id_label,
        )
        worker = Worker(store, {emails: handler})
        # One job claimed, run and acked: every labelled series, histograms included.
        with worker.events() as events:
            async with trio.open_nursery() as nursery:
                await nursery.start(metrics.run, worker)
                await nursery.start(worker.run)
                async for event in events:
                    if event.kind == "ack":
                        worker.stop()
    found: dict[str, dict[str, Family]] = {}
    for dotted, registry in registries.items():
        families = {}
        for family in registry.collect():
            labels = {name for sample in family.samples for name in sample.labels}
            if family.type == "histogram":
                labels.discard("le")
            families[_exposed_name(family.name, family.type)] = Family(
                family.type,
                frozenset(labels),
                frozenset(sample.name for sample in family.samples),
            )
        found[dotted] = families
    return found


@functools.cache
def exported_metrics(
    namespace: str = DEFAULT_NAMESPACE, *, worker_id_label: bool = False
) -> dict[str, dict[str, Family]]:
    """Collector (dotted name) -> exposed metric name -> what a scrape shows of it."""
    return trio.run(_collect, namespace, worker_id_label)


def _renamed(name: str, namespace: str) -> str:
    return (f"{namespace}_" if namespace else "") + name.removeprefix(f"{DEFAULT_NAMESPACE}_")


def _metric_table_problems(table: Table, dotted: str) -> list[str]:
    actual = exported_metrics()[dotted]
    documented = {_spans(row["metric"])[0]: row for row in table.rows}
    problems = [
        f"{name} is exported by {dotted} but not on the page ({table.spec})"
        for name in sorted(actual.keys() - documented.keys())
    ] + [
        f"{table.where(documented[name])}: the page lists {name}, which {dotted} does not export"
        for name in sorted(documented.keys() - actual.keys())
    ]
    for name in sorted(actual.keys() & documented.keys()):
        row, family = documented[name], actual[name]
        kind = row["type"].split(":")[0].strip()
        if kind != family.type:
            problems.append(
                f"{table.where(row)}: {name} is a {family.type}, the page says {kind!r}"
            )
        labels = frozenset(_spans(row["labels"]))
        if labels != family.labels:
            problems.append(
                f"{table.where(row)}: {name} has labels {sorted(family.labels)}, the page says "
                f"{sorted(labels)}"
            )
        base = name.removesuffix("_total") if family.type == "counter" else name
        suffixes = [span for span in _spans(row["type"]) if span.startswith("_")]
        series = {name} if not suffixes else {base + suffix for suffix in suffixes}
        if dotted in CREATED_SERIES and family.type in ("counter", "histogram"):
            series.add(f"{base}_created")
        if not family.series <= series or not series - {f"{base}_created"} <= family.series:
            problems.append(
                f"{table.where(row)}: {name}'s series are {sorted(family.series)}, the page "
                f"says {sorted(series)}"
            )
    if dotted == "alkstore_trio.contrib.prometheus.WorkerMetrics":
        for name, family in exported_metrics(worker_id_label=True)[dotted].items():
            if name in actual and family.labels != actual[name].labels | {"worker_id"}:
                problems.append(
                    f"{dotted}(worker_id_label=True): {name} has labels "
                    f"{sorted(family.labels)}, not the page's and worker_id"
                )
    problems += [
        f"{table.where(documented[name])}: {name} is not in the default namespace"
        for name in documented
        if not name.startswith(f"{DEFAULT_NAMESPACE}_")
    ]
    # The page's rule for another namespace: it replaces the prefix, "" drops it.
    for namespace in OTHER_NAMESPACES:
        names = set(exported_metrics(namespace)[dotted])
        expected = {_renamed(name, namespace) for name in actual}
        if names != expected:
            problems.append(
                f"{dotted}(namespace={namespace!r}) exports {sorted(names - expected)} "
                f"instead of {sorted(expected - names)}"
            )
    return problems


def _metrics_problems(tables: list[Table]) -> list[str]:
    problems = []
    listed: dict[str, Table] = {}
    for table in tables:
        if table.spec.startswith("metrics "):
            dotted = table.spec.removeprefix("metrics ").strip()
            if dotted not in COLLECTORS or dotted in listed:
                problems.append(
                    f"configuration.md line {table.line}: {table.spec} names no collector of "
                    f"{sorted(COLLECTORS)}, or one listed already"
                )
                continue
            listed[dotted] = table
    problems += [f"no metrics table for {dotted}" for dotted in COLLECTORS if dotted not in listed]
    for dotted, table in listed.items():
        problems += _metric_table_problems(table, dotted)
    return problems


def problems(text: str) -> list[str]:
    """Every disagreement between the page's text and the code."""
    tables = read_tables(text)
    found = []
    for table in tables:
        if table.spec != "env" and not table.spec.startswith(("cli", "metrics ")):
            found += _api_problems(table)
    return found + _cli_problems(tables) + _env_problems(tables) + _metrics_problems(tables)


def test_configuration_page_matches_the_code():
    text = PAGE.read_text(encoding="utf-8")
    specs = {table.spec.split()[0] for table in read_tables(text)}
    # Each kind of setting has its table (a marker typo would silently drop one).
    assert {
        "env",
        "alkstore_trio.open_store",
        "alkstore_trio.QueueOpts",
        "alkstore_trio.Queue.enqueue",
        "alkstore_trio.Worker",
        "alkstore_trio.open_supervisor",
        "alkstore_trio.contrib.prometheus.StoreStatsMetrics",
        "cli",
        "cli-by-command",
        "metrics",
    } <= specs
    assert problems(text) == []


#: Edits that make the page wrong, and what the check must then say.
DRIFTS = {
    "a default that drifted": (
        "| `visibility_timeout_s` | `float` | `300.0` |",
        "| `visibility_timeout_s` | `float` | `30.0` |",
        "defaults to 300.0",
    ),
    "an int where the code has a float": (
        "| `poll_interval_s` | `float` | `5.0` |",
        "| `poll_interval_s` | `float` | `5` |",
        "defaults to 5.0",
    ),
    "a parameter the page forgot": (
        "| `listen` | `bool` |",
        "| `listen_forgotten` | `bool` |",
        "option 'listen' is not on the page",
    ),
    "a CLI default that drifted": (
        "| `--concurrency N` | `10` |",
        "| `--concurrency N` | `20` |",
        "worker --concurrency defaults to 10",
    ),
    "a CLI option the page forgot": (
        "| `dead purge` | `--json` | off |",
        "| `dead purge` | `--jsonn` | off |",
        "dead purge --json is not on the page",
    ),
    "an environment variable that is not read": (
        "| `NO_COLOR` |",
        "| `NO_COLOUR` |",
        "NO_COLOUR, which the package never reads",
    ),
    "a metric the page forgot": (
        "| `alkstore_queue_cancelled_total` | counter | `queue` | live jobs of the queue "
        "cancelled (D27) |\n",
        "",
        "alkstore_queue_cancelled_total is exported by "
        "alkstore_trio.contrib.prometheus.StoreStatsMetrics but not on the page",
    ),
    "a metric that is not exported": (
        "| `alkstore_jobs_lease_lost_total` | counter |",
        "| `alkstore_jobs_leases_lost_total` | counter |",
        "the page lists alkstore_jobs_leases_lost_total, which "
        "alkstore_trio.contrib.prometheus.WorkerMetrics does not export",
    ),
    "a counter without its _total": (
        "| `alkstore_queue_stats_failures_total` | counter |",
        "| `alkstore_queue_stats_failures` | counter |",
        "the page lists alkstore_queue_stats_failures, which",
    ),
    "a metric of the wrong type": (
        "| `alkstore_jobs_in_flight` | gauge |",
        "| `alkstore_jobs_in_flight` | counter |",
        "alkstore_jobs_in_flight is a gauge, the page says 'counter'",
    ),
    "a label the page forgot": (
        "| `alkstore_queue_jobs` | gauge | `queue`, `state` |",
        "| `alkstore_queue_jobs` | gauge | `queue` |",
        "alkstore_queue_jobs has labels ['queue', 'state'], the page says ['queue']",
    ),
    "a histogram series that does not exist": (
        "| `alkstore_job_run_seconds` | histogram: `_bucket`, `_sum`, `_count` |",
        "| `alkstore_job_run_seconds` | histogram: `_bucket`, `_sum`, `_count`, `_max` |",
        "alkstore_job_run_seconds's series are",
    ),
}


@pytest.mark.parametrize(("old", "new", "expected"), DRIFTS.values(), ids=DRIFTS.keys())
def test_the_check_catches_a_page_that_drifted(old, new, expected):
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the page changed: update this test's {old!r}"
    found = problems(text.replace(old, new))
    assert any(expected in problem for problem in found), found


def test_the_worker_cli_and_the_worker_api_agree_on_shared_defaults():
    # Spelled out once more without the page: the CLI's defaults are the API's.
    worker = _subparser(_parser(), "worker")
    api = _parameters(_resolve("alkstore_trio.Worker"), keyword_only=True)
    shared = {a.dest: a.default for a in worker._actions if a.dest in api}
    assert shared
    assert {name: api[name] for name in shared} == shared
