"""Write the figures of the last test run into ``docs/explanation/guarantees.md``.

The tests that back the page's promises record what they did (faults injected, jobs and
events checked, inputs tried, jobs lost...) with the ``figures`` fixture
(``tests/_figures.py``), which merges them into ``.figures/last-run.json`` (or
``$ALKSTORE_FIGURES_FILE``). This script renders :data:`ROWS` from that file as a
Markdown table and replaces the page's block between :data:`BEGIN` and :data:`END`.

A row whose test is not in the file (a slow test not run here, a test of another
machine's run) keeps the row the page already has, so regenerating after a partial run
never erases figures; ``--drop-missing`` renders it as "not in the last run" instead.

Usage (``just figures`` runs the tests, then this)::

    python tests/tools/guarantees_figures.py [--figures FILE] [--page FILE] [--check]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from _figures import figures_path, read_figures  # noqa: E402 - after the path

PAGE = ROOT / "docs" / "explanation" / "guarantees.md"
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
#: How the page links a repository file (the page is docs/explanation/guarantees.md).
TO_ROOT = "../../"
HEADER = (
    "| Promise | Test | What it does | Figures of the last run | Result | Run |",
    "|---|---|---|---|---|---|",
)

#: Figures every history-checked test shows, in this order.
HISTORY = (
    ("jobs_checked", "jobs checked"),
    ("events_checked", "events checked"),
    ("claims", "claims"),
    ("reclaims", "reclaims"),
    ("refused_ops", "operations refused"),
    ("violations", "history violations"),
    ("lost", "jobs lost"),
)
#: The unit of a figure, by the suffix of its name; these are maxima across nodes.
UNITS = {"_s": "s", "_ms": "ms", "_kib": "KiB", "_mib": "MiB"}


@dataclass(frozen=True)
class Row:
    """One row of the table: a test function (or every test of a file) and what it shows.

    Attributes:
        promise: The promise or fault, as the page names it.
        path: The test file, from the repository's root.
        function: The test function; ``None``: every test of the file.
        done: What the test does, in a sentence.
        shown: ``(figure, label)`` pairs to show, in order; empty: every figure.
        split_by: ``"engine"`` (the ``engine`` figure) or ``"param"`` (the node id's
            ``[...]``): figures are summed per group instead of over all nodes.
        slow: Marked slow (not in the default run): what to say when it never ran here.
    """

    promise: str
    path: str
    function: str | None
    done: str
    shown: tuple[tuple[str, str], ...] = ()
    split_by: str | None = None
    slow: bool = False

    @property
    def node_prefix(self) -> str:
        return f"{self.path}::" if self.function is None else f"{self.path}::{self.function}"

    def matches(self, node_id: str) -> bool:
        if self.function is None:
            return node_id.startswith(self.node_prefix)
        return node_id == self.node_prefix or node_id.startswith(self.node_prefix + "[")


ROWS: tuple[Row, ...] = (
    Row(
        "History checker",
        "tests/runtime/test_history_worker.py",
        "test_history_a_real_run_with_faults_passes_the_checker",
        "Two workers (in memory, mock clock) with retries, a dead letter, a timeout, a "
        "cancel and a stale worker; every event goes through the per-job history checker.",
        (*HISTORY, ("concurrent_runs", "honest overlapping runs")),
    ),
    Row(
        "History checker",
        "tests/runtime/test_history_worker.py",
        "test_history_a_tampered_record_of_a_real_run_fails",
        "The same record, tampered one way at a time (stale ack, overlap, double handout, "
        "lost ack, foreign ack, double ack): the checker must catch each.",
        (("tamperings_tried", "tamperings tried"), ("tamperings_caught", "caught")),
    ),
    Row(
        "Worker crash",
        "tests/faults/test_worker_faults.py",
        "test_r8_kill9_one_of_three_workers_draining_10000_jobs",
        "Three worker processes drain 10,000 jobs; one is killed with SIGKILL while its "
        "handlers run; the others reclaim its jobs once the leases lapse.",
        (
            ("workers", "worker processes"),
            ("faults_injected", "killed"),
            ("handlers_running_at_kill", "handlers running at the kill"),
            ("reruns", "jobs run again"),
            ("reclaim_after_kill_max_s", "slowest reclaim after the kill"),
            ("reclaim_bound_s", "bound"),
            *HISTORY,
        ),
    ),
    Row(
        "Worker paused (stale worker)",
        "tests/faults/test_stale_worker.py",
        "test_q4_r6_stale_worker_resumed_after_reclaim_is_refused_everything",
        "A worker frozen with SIGSTOP past its leases; another reclaims and acks its jobs; "
        "resumed with SIGCONT, everything it tries is refused and its handlers cancelled.",
        (
            ("paused_s", "paused"),
            ("visibility_timeout_s", "visibility timeout"),
            ("stale_claims_refused", "stale claims refused"),
            ("stale_ops_accepted", "stale operations accepted"),
            *HISTORY,
        ),
    ),
    Row(
        "Sessions killed",
        "tests/faults/test_sessions_killed.py",
        "test_r8_q4_sessions_killed_repeatedly_under_load_worker_reconnects_nothing_lost",
        "Every session of one worker (pool and LISTEN) terminated with "
        "pg_terminate_backend, in rounds, under a steady producer.",
        (
            ("kill_rounds", "rounds"),
            ("faults_injected", "sessions terminated"),
            ("engine_errors_seen", "engine errors seen"),
            ("acked_again_after_s", "acking again after"),
            *HISTORY,
        ),
    ),
    Row(
        "Database restart",
        "tests/faults/test_postgresql_restart.py",
        "test_r8_postgresql_restart_under_load_nothing_lost",
        "A throwaway cluster under load: pg_ctl restart -m fast, then stop -m immediate "
        "past every lease and start; two worker processes survive both.",
        (
            ("faults_injected", "restarts"),
            ("jobs_committed", "jobs committed"),
            ("enqueue_calls_failed", "enqueue calls failed while down"),
            ("running_again_after_restart_s", "running again after the restart"),
            ("running_again_after_crash_s", "after the crash"),
            ("reruns", "jobs run again"),
            *HISTORY,
        ),
        slow=True,
    ),
    Row(
        "Slow and cut network",
        "tests/faults/test_network.py",
        "test_q4_r8_cut_network_late_ack_is_refused_after_another_worker_reclaimed",
        "A worker behind a proxy adding latency, then black-holing traffic past the "
        "visibility timeout; another worker reclaims; the held ack arrives late.",
        (
            ("latency_each_way_s", "latency each way"),
            ("black_holed_s", "black-holed"),
            ("visibility_timeout_s", "visibility timeout"),
            ("late_acks_refused", "late acks refused"),
            *HISTORY,
        ),
    ),
    Row(
        "Slow and cut network",
        "tests/faults/test_network.py",
        "test_r6_r8_cut_network_worker_stops_its_handler_as_the_lease_lapses",
        "Cut before the first heartbeat: the worker stops its own handler as its lease "
        "lapses; its held heartbeat is refused after the partition heals.",
        (
            ("black_holed_s", "black-holed"),
            ("handler_stopped_from_lease_end_s", "handler stopped, from the lease's end"),
            ("stale_ops_accepted", "stale operations accepted"),
            *HISTORY,
        ),
    ),
    Row(
        "LISTEN lost",
        "tests/faults/test_worker_faults.py",
        "test_r3_listener_session_killed_worker_still_picks_up_within_poll_interval",
        "The worker's LISTEN session terminated and kept from reconnecting, then allowed "
        "back: jobs are picked up by the re-poll meanwhile, woken again after.",
        (
            ("poll_interval_s", "poll interval"),
            ("pickup_max_without_listener_s", "slowest pickup without a listener"),
            ("pickup_max_woken_s", "slowest woken pickup"),
            ("listener_back_after_s", "listener back after"),
            *HISTORY,
        ),
    ),
    Row(
        "LISTEN lost",
        "tests/faults/test_poll_only.py",
        "test_r4_poll_only_worker_process_picks_every_job_up_within_poll_interval",
        "A worker with LISTEN disabled (as behind a transaction pooler), jobs enqueued at "
        "random moments of its poll cycle.",
        (
            ("poll_interval_s", "poll interval"),
            ("pickups", "jobs"),
            ("pickup_max_s", "slowest pickup"),
            ("listen_sessions", "LISTEN sessions"),
            *HISTORY,
        ),
    ),
    Row(
        "Graceful stop",
        "tests/faults/test_worker_faults.py",
        "test_r7_sigterm_drains_and_releases",
        "SIGTERM to a worker process running two short and three hour-long handlers, "
        "with a 2 s grace.",
        (
            ("exit_after_s", "exited after"),
            ("grace_s", "grace"),
            ("released", "jobs released"),
            *HISTORY,
        ),
    ),
    Row(
        "Graceful stop",
        "tests/faults/test_worker_faults.py",
        "test_r7_a_second_sigterm_cancels_at_once_and_releases",
        "A second SIGTERM during a 600 s grace cancels the handlers at once.",
        (("exit_after_s", "exited after"), ("released", "jobs released"), *HISTORY),
    ),
    Row(
        "Long transaction (bloat)",
        "tests/faults/test_bloat_soak.py",
        "test_r2_bloat_soak_short_claim_latency_bounded_never_idle_in_transaction",
        "Producer and two workers for 20 s while another session holds a REPEATABLE READ "
        "snapshot open for the middle 10 s.",
        (
            ("snapshot_held_s", "snapshot held"),
            ("claim_p99_before_ms", "claim p99 before"),
            ("claim_p99_during_ms", "during"),
            ("claim_p99_after_ms", "after"),
            ("dead_tuples_kept_by_snapshot", "dead tuples VACUUM could not remove"),
            ("dead_tuples_after", "after"),
            ("idle_in_transaction_seen", "library sessions idle in transaction"),
            *HISTORY,
        ),
    ),
    Row(
        "Long transaction (bloat)",
        "tests/faults/test_bloat_soak.py",
        "test_r2_bloat_soak_long_claim_latency_bounded_never_idle_in_transaction",
        "The same for 240 s at ~400 jobs/s, the snapshot held 120 s.",
        (
            ("snapshot_held_s", "snapshot held"),
            ("claim_p99_before_ms", "claim p99 before"),
            ("claim_p99_during_ms", "during"),
            ("claim_p99_after_ms", "after"),
            ("dead_tuples_kept_by_snapshot", "dead tuples VACUUM could not remove"),
            ("dead_tuples_after", "after"),
            ("idle_in_transaction_seen", "library sessions idle in transaction"),
            *HISTORY,
        ),
        slow=True,
    ),
    Row(
        "Long run",
        "tests/faults/test_long_run.py",
        "test_r10_long_run_jobs_through_two_workers_rss_flat_nothing_lost",
        "1,000,000 jobs through two worker processes; RSS sampled, tables measured after "
        "the sweeps, the whole record history-checked in shards.",
        (
            ("jobs", "jobs"),
            ("jobs_per_s", "jobs/s"),
            ("rss_growth_max_kib", "RSS growth"),
            ("jobs_table_mib_after", "jobs table after"),
            *HISTORY,
        ),
        slow=True,
    ),
    Row(
        "A cancel reaches the running handler",
        "tests/faults/test_cancel_running.py",
        "test_r15_cancelling_200_running_jobs_reaches_every_handler",
        "200 jobs running across three worker processes, each cancelled with "
        "queue.cancel: every handler is cancelled and every job recorded cancelled.",
        (
            ("jobs", "running jobs cancelled"),
            ("workers", "worker processes"),
            ("p50_ms", "cancel to handler's end p50"),
            ("p99_ms", "p99"),
            ("max_ms", "max"),
            *HISTORY,
        ),
    ),
    Row(
        "A wait ends when its job does",
        "tests/faults/test_wait_faults.py",
        "test_q19_4_waits_survive_killing_their_listen_session",
        "80 waits (their poll an hour away) on jobs two worker processes run, while the "
        "waiting store's LISTEN session is killed again and again.",
        (
            ("waits", "waits"),
            ("waits_ended", "ended with their job"),
            ("listen_sessions_killed", "LISTEN sessions killed"),
            *HISTORY,
        ),
    ),
    Row(
        "A wait ends when its job does",
        "tests/faults/test_wait_faults.py",
        "test_q19_4_waits_survive_a_postgresql_restart",
        "The same 80 waits through a pg_ctl restart of a throwaway cluster.",
        (
            ("waits", "waits"),
            ("waits_ended", "ended with their job"),
            ("restart_s", "restart took"),
            *HISTORY,
        ),
        slow=True,
    ),
    Row(
        "Exactly-once database effects",
        "tests/faults/test_tx_complete_stale_worker.py",
        "test_q19_6_r16_a_frozen_workers_transactions_roll_back_and_leave_no_effect",
        "A worker frozen with SIGSTOP inside its handlers' transactions (effect row "
        "written, completion not yet sent); another worker reclaims and completes the "
        "jobs in its own transactions; the frozen one is resumed.",
        (
            ("paused_s", "paused"),
            ("visibility_timeout_s", "visibility timeout"),
            ("effect_rows", "effect rows"),
            ("effects_from_superseded_claims", "effects from superseded claims"),
            ("completions_refused", "completions refused"),
            *HISTORY,
        ),
    ),
    Row(
        "Clock skew",
        "tests/faults/test_fault_clock_skew.py",
        "test_q3_q4_q5_workers_with_a_local_clock_an_hour_off_behave_like_a_control_fleet",
        "Worker processes whose local clock is an hour fast or slow, one killed mid-job, "
        "beside an unskewed control fleet running the same jobs and faults: identical "
        "outcomes, and timings within a tolerance of the control's.",
        (
            ("skews_s", "local clocks off by"),
            ("processes", "worker processes"),
            ("faults_injected", "faults"),
            ("timings_compared", "timings compared"),
            ("largest_timing_difference_s", "largest difference"),
            *HISTORY,
        ),
    ),
    Row(
        "Engine agrees with the contract",
        "tests/stateful/test_core_machine.py",
        "test_q2_q10_core_job_table_agrees_with_the_reference_model",
        "Hypothesis state machine: the indexed job table against the naive reference "
        "model, with the clock moved onto every deadline and back.",
        (("examples", "examples"), ("agreement_checks", "agreement checks")),
    ),
    Row(
        "Engine agrees with the contract",
        "tests/stateful/test_engine_vs_model.py",
        "test_q1_q10_memory_engine_agrees_with_the_reference_model",
        "The in-memory engine against the reference model through the public API, every "
        "job compared after every step.",
        (("examples", "examples"), ("steps_per_example", "steps each")),
    ),
    Row(
        "Engine agrees with the contract",
        "tests/stateful/test_postgres_vs_model.py",
        "test_q1_q10_postgres_engine_agrees_with_the_reference_model",
        "The same on PostgreSQL, on both drivers.",
        (("examples", "examples"), ("steps_per_example", "steps each")),
        split_by="param",
    ),
    Row(
        "Hostile input",
        "tests/security/test_input_abuse.py",
        None,
        "Every entry point that takes input (payloads, queue and schema names, numbers, "
        "dates, batches, claim and handle arguments, options): valid input round-trips, "
        "invalid input is refused before any engine call and leaves no trace.",
        (("valid_inputs", "valid inputs round-tripped"), ("invalid_inputs", "invalid refused")),
        split_by="engine",
    ),
    Row(
        "SQL safety",
        "tests/security/test_sql_safety.py",
        "test_security_no_string_built_sql_in_the_postgres_engine",
        "Static scan of the engine for SQL built from values.",
        (
            ("files_scanned", "modules"),
            ("sql_building_sites", "interpolation sites (quoted identifiers)"),
            ("unsafe_sites", "unsafe"),
        ),
    ),
    Row(
        "SQL safety",
        "tests/security/test_sql_safety.py",
        "test_security_the_scan_catches_string_built_sql",
        "The scan on five ways of building SQL from a value.",
        (("unsafe_examples_caught", "caught"),),
    ),
    Row(
        "SQL safety",
        "tests/security/test_sql_safety.py",
        "test_security_sql_files_use_only_the_schema_placeholder_and_bound_parameters",
        "The .sql files: no placeholder but the schema's, only bound parameters.",
        (("sql_files", "SQL files"),),
    ),
    Row(
        "SQL safety",
        "tests/security/test_sql_safety.py",
        "test_security_every_object_in_the_sql_files_is_schema_qualified",
        "Every table and function in the .sql files named through its schema.",
        (("sql_files", "SQL files"), ("names_checked", "names checked")),
    ),
    Row(
        "SQL safety",
        "tests/security/test_sql_safety.py",
        "test_security_a_hostile_search_path_changes_nothing",
        "A search_path whose first schema holds look-alikes (a clock stuck in 1970, "
        "claimable rows, a bogus version): the conformance checks run through it.",
        (("conformance_checks_passed", "conformance checks passed"),),
    ),
    Row(
        "Least privilege",
        "tests/security/test_roles.py",
        "test_security_runtime_role_with_dml_only_runs_a_worker_migration_role_migrates",
        "Migrations under an owner role; a worker under a role with DML rights only.",
        (("ddl_refused", "DDL statements refused"), *HISTORY),
    ),
    Row(
        "Secrets",
        "tests/security/test_sql_safety.py",
        "test_security_dsn_passwords_never_appear_in_errors_or_logs",
        "A sentinel password in failing DSNs: wrong user, refused port, unknown host, "
        "conninfo form, missing schema.",
        (("failure_cases", "cases"), ("log_records_checked", "log records checked")),
    ),
    Row(
        "Secrets",
        "tests/security/test_sql_safety.py",
        "test_security_no_password_in_reprs_errors_or_logs_of_a_working_store",
        "A sentinel password in a working store's DSN: reprs, errors, logs.",
        (("texts_checked", "texts checked"), ("log_records_checked", "log records checked")),
    ),
    Row(
        "Secrets",
        "tests/security/test_sql_safety.py",
        "test_security_payloads_never_appear_in_logs_postgres",
        "A sentinel payload through every outcome of a worker logging at DEBUG.",
        (("log_records_checked", "log records checked"),),
    ),
    Row(
        "Secrets",
        "tests/security/test_sql_safety.py",
        "test_security_payloads_never_appear_in_logs_memory",
        "The same on the in-memory engine.",
        (("log_records_checked", "log records checked"),),
    ),
    Row(
        "Secrets",
        "tests/faults/test_secrets_fault_run.py",
        "test_security_no_password_or_payload_in_logs_errors_or_reprs_over_a_fault_run",
        "A sentinel DSN password and sentinel payloads through a fault run (SIGKILL, "
        "sessions terminated, failing handlers, operator commands); every output searched.",
        (
            ("faults_injected", "faults"),
            ("sessions_terminated", "sessions terminated"),
            ("operator_commands", "operator commands"),
            ("jobs_with_sentinel", "jobs with a sentinel payload"),
            ("debug_log_lines", "DEBUG log lines"),
            ("bytes_scanned", "bytes of output scanned"),
            ("leaks", "leaks"),
            *HISTORY,
        ),
    ),
    Row(
        "Secrets",
        "tests/security/test_sql_safety.py",
        "test_security_no_pickle_anywhere",
        "No pickle, marshal, shelve or dill import in the package.",
        (("modules_scanned", "modules scanned"),),
    ),
)


# --- rendering ---------------------------------------------------------------------------


def render_table(
    rows: Sequence[Row], entries: dict[str, dict[str, Any]], old: dict[str, str] | None = None
) -> str:
    """The Markdown table of ``rows`` from the figures file's ``entries``; a row without
    entries keeps its line from ``old`` (by test cell) if there is one."""
    lines = list(HEADER)
    for row in rows:
        matching = [(node, entries[node]) for node in sorted(entries) if row.matches(node)]
        cell = link_cell(row)
        if not matching and old is not None and cell in old:
            lines.append(old[cell])
            continue
        lines.append(render_row(row, matching))
    return "\n".join(lines)


def link_cell(row: Row) -> str:
    """The row's Test cell: a link to the file, named ``file.py::function``."""
    name = Path(row.path).name
    if row.function is None:
        return f"[`{name}`]({TO_ROOT}{row.path}) (every test)"
    return f"[`{name}::{row.function}`]({TO_ROOT}{row.path})"


def render_row(row: Row, matching: Sequence[tuple[str, dict[str, Any]]]) -> str:
    if not matching:
        if row.slow:
            numbers = (
                "slow, run by hand (`just figures -m slow`): see "
                "[performance](performance.md) / the last figures"
            )
        else:
            numbers = "not in the last run"
        cells = [row.promise, link_cell(row), row.done, numbers, "not run here", "—"]
    else:
        cells = [
            row.promise,
            link_cell(row),
            row.done,
            render_numbers(row, matching),
            render_result(matching),
            render_run(matching),
        ]
    return "| " + " | ".join(_escape(cell) for cell in cells) + " |"


def render_numbers(row: Row, matching: Sequence[tuple[str, dict[str, Any]]]) -> str:
    groups: dict[str, list[dict[str, Any]]] = {}
    for node, entry in matching:
        figures = entry.get("figures", {})
        if row.split_by == "engine":
            key = str(figures.get("engine", "?"))
        elif row.split_by == "param":
            key = node.partition("[")[2].rstrip("]") or "?"
        else:
            key = ""
        groups.setdefault(key, []).append(figures)
    parts = []
    for key in sorted(groups, key=_group_order):
        text = _figures_text(row, combine(groups[key]))
        if key:
            label = "no engine reached" if key == "none" else key
            text = f"{label}: {text}"
        parts.append(text)
    return "; ".join(parts) if parts else "no figures recorded"


def _group_order(key: str) -> tuple[int, str]:
    return (1 if key == "none" else 0, key)


def combine(figure_sets: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several nodes as one: counts summed; durations, sizes and other
    measured values (names with a unit suffix) and ``steps_per_*`` their maximum;
    strings kept if they agree."""
    combined: dict[str, Any] = {}
    for figures in figure_sets:
        for name, value in figures.items():
            if name not in combined:
                combined[name] = value
            elif isinstance(value, str) or isinstance(combined[name], str):
                if combined[name] != value:
                    combined[name] = "various"
            elif _unit(name) or name.startswith("steps_per"):
                combined[name] = max(combined[name], value)
            else:
                combined[name] = combined[name] + value
    return combined


def _figures_text(row: Row, figures: dict[str, Any]) -> str:
    shown = row.shown or tuple((name, _label(name)) for name in figures)
    parts = []
    for name, label in shown:
        if name not in figures or name == "engine":
            continue
        parts.append(f"{label} {_format(name, figures[name])}")
    return ", ".join(parts) if parts else "no figures recorded"


def _label(name: str) -> str:
    """A figure's name as a label (without its unit suffix)."""
    for suffix in UNITS:
        if name.endswith(suffix):
            name = name.removesuffix(suffix)
            break
    return name.replace("_", " ")


def _unit(name: str) -> str | None:
    for suffix, unit in UNITS.items():
        if name.endswith(suffix):
            return unit
    return None


def _format(name: str, value: Any) -> str:
    if isinstance(value, bool):
        text = str(int(value))
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float) and abs(value) >= 100:
        text = f"{value:,.0f}"
    elif isinstance(value, float) and abs(value) >= 1:
        text = f"{value:.2f}".rstrip("0").rstrip(".")
    elif isinstance(value, float):
        text = f"{value:.2g}"
    else:
        text = str(value)
    unit = _unit(name)
    return f"{text} {unit}" if unit else text


def render_result(matching: Sequence[tuple[str, dict[str, Any]]]) -> str:
    failed = sum(entry.get("outcome") != "passed" for _, entry in matching)
    total = len(matching)
    if failed:
        return f"**failed** ({failed} of {total})"
    return "passed" if total == 1 else f"passed ({total} of {total})"


def render_run(matching: Sequence[tuple[str, dict[str, Any]]]) -> str:
    latest = max((entry for _, entry in matching), key=lambda entry: entry.get("date") or "")
    date = str(latest.get("date") or "?").replace("T", " ").removesuffix("Z")[:16] + " UTC"
    commit = latest.get("commit") or "?"
    dirty = " + local changes" if latest.get("dirty") else ""
    return f"{date}, `{str(commit)[:10]}`{dirty}"


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


# --- the page --------------------------------------------------------------------------


def split_page(text: str) -> tuple[str, str, str]:
    """The page before the block (through :data:`BEGIN`), the block, and the rest (from
    :data:`END`)."""
    start = text.find(BEGIN)
    end = text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    head = text[: start + len(BEGIN)]
    return head, text[start + len(BEGIN) : end], text[end:]


def old_rows(block: str) -> dict[str, str]:
    """The block's table lines by their Test cell (the second cell)."""
    rows = {}
    for line in block.splitlines():
        cells = _cells(line)
        if len(cells) >= 2 and not set(cells[0]) <= {"-"} and cells[0] != "Promise":
            rows[cells[1]] = line
    return rows


def _cells(line: str) -> list[str]:
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return []
    cells, current, escaped = [], "", False
    for char in line[1:-1]:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            current += char
            escaped = True
        elif char == "|":
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def table_test_cells(page_text: str) -> list[str]:
    """The Test cells of the page's generated table, in order."""
    _, block, _ = split_page(page_text)
    return list(old_rows(block))


def regenerate(page_text: str, entries: dict[str, dict[str, Any]], *, keep: bool = True) -> str:
    head, block, tail = split_page(page_text)
    table = render_table(ROWS, entries, old_rows(block) if keep else None)
    return f"{head}\n{table}\n{tail}"


def unmatched(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Node ids of the figures file that no row shows."""
    return [node for node in sorted(entries) if not any(row.matches(node) for row in ROWS)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=None, help="the figures JSON file")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to rewrite")
    parser.add_argument(
        "--drop-missing",
        action="store_true",
        help="render rows without figures as 'not in the last run' instead of keeping them",
    )
    parser.add_argument(
        "--check", action="store_true", help="only say whether the page is up to date"
    )
    args = parser.parse_args(argv)
    path = args.figures or figures_path(ROOT)
    entries = read_figures(path)
    if not entries:
        print(f"no figures in {path}: run the tests first (just figures)", file=sys.stderr)
        return 1
    text = args.page.read_text(encoding="utf-8")
    new = regenerate(text, entries, keep=not args.drop_missing)
    for node in unmatched(entries):
        print(f"note: {node} recorded figures but no row of the table shows them")
    if args.check:
        if new != text:
            print(f"{args.page} is not up to date with {path}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.page.write_text(new, encoding="utf-8")
        print(f"wrote the figures of {len(entries)} tests from {path} into {args.page}")
    else:
        print(f"{args.page} already shows the figures of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
