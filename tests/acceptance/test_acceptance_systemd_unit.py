"""Issue 6 item 4: the systemd units we ship and show keep the worker's stop contract.

``examples/systemd/alkstore-worker.service`` and the units in the how-to pages
(``run-a-worker.md``, ``deploy-workers.md``) are copied by users as they are, so each is
parsed here and checked for what a graceful ``systemctl stop`` depends on (rule R7):

- ``ExecStart`` is a real ``alkstore-trio worker`` command line: our own argument parser
  accepts it (with ``ALKSTORE_DSN`` from the environment), and it has no ``--dsn``
  (a password on a command line is visible to every user through ``ps``);
- the DSN comes from ``EnvironmentFile=``, never from an ``Environment=`` line in the
  unit (which every user can read with ``systemctl show``);
- ``KillSignal`` is a signal the worker stops gracefully on (SIGTERM), and
  ``TimeoutStopSec`` exceeds ``--shutdown-grace-s`` by at least
  :data:`RELEASE_MARGIN_S`: after the grace the worker still has to release the jobs
  whose handlers it cancelled, and a SIGKILL in the middle of that leaves them to wait
  for their leases instead;
- ``KillMode`` is ``mixed`` or ``control-group``: ``process`` and ``none`` would leave
  the processes a handler started running after the worker exited, outside any stop;
  ``SendSIGKILL`` is not turned off (a hung worker must still end);
- ``Type=notify`` (the worker speaks sd_notify: ready once it claims, stopping at the
  first signal, watchdog pings), ``exec`` or ``simple``; a ``WatchdogSec=`` only with
  ``Type=notify`` (nothing else pings it) and long enough for the worker's pings, sent
  every half of it;
- ``Restart=on-failure``, and never a restart loop on a usage error (status 2);
- the example unit's sandbox keeps what the worker needs: TCP and Unix sockets (to reach
  PostgreSQL), and no write access it does not need (``ProtectSystem=strict``,
  ``NoNewPrivileges=yes``).

Where ``systemd-analyze`` is installed, the example unit is also verified by systemd
itself (every directive known and well-formed).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from alkstore_trio._cli import build_parser
from alkstore_trio._cli._serve import STOP_SIGNALS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_UNIT = ROOT / "examples" / "systemd" / "alkstore-worker.service"
#: The pages whose ```text blocks show units (a block starting "# /etc/systemd/system/").
UNIT_PAGES = (ROOT / "docs/how-to/run-a-worker.md", ROOT / "docs/how-to/deploy-workers.md")
#: The least time systemd must leave the worker after the grace, to release the jobs of
#: the handlers it cancelled (one statement per queue; retried with backoff if the
#: database is slow) and print its summary.
RELEASE_MARGIN_S = 10.0
#: A DSN for the parser's environment (never connected to).
SOME_DSN = "postgresql://app@db.invalid:5432/app"

_TIME_UNITS = {
    "us": 1e-6,
    "usec": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}
_TIME_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


@dataclass(frozen=True)
class Unit:
    """A parsed unit file: ``entries[(section, key)]`` lists every value, in order."""

    name: str
    entries: dict[tuple[str, str], list[str]]

    def values(self, section: str, key: str) -> list[str]:
        return self.entries.get((section, key), [])

    def one(self, section: str, key: str) -> str | None:
        values = self.values(section, key)
        assert len(values) <= 1, f"{self.name}: {key}= is set {len(values)} times"
        return values[0] if values else None


def parse_unit(text: str, name: str) -> Unit:
    """Parse a unit as systemd reads it: ``[Section]`` headers, ``Key=value`` lines,
    ``#``/``;`` comments, and a trailing backslash continuing a line (comment lines
    inside a continuation are skipped)."""
    entries: dict[tuple[str, str], list[str]] = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, equals, value = line.partition("=")
        assert equals, f"{name}: not a Key=value line: {line!r}"
        entries.setdefault((section, key.strip()), []).append(value.strip())
    assert not pending, f"{name}: the last line ends with a backslash"
    return Unit(name, entries)


def time_span_s(text: str) -> float:
    """A systemd time span (``45``, ``45s``, ``1min 30s``, ``2m``) in seconds."""
    total, end = 0.0, 0
    for match in _TIME_PART.finditer(text.strip()):
        assert text.strip()[end : match.start()].strip() == "", f"bad time span {text!r}"
        assert match[2] in _TIME_UNITS, f"unknown unit {match[2]!r} in {text!r}"
        total += float(match[1]) * _TIME_UNITS[match[2]]
        end = match.end()
    assert end > 0, f"bad time span {text!r}"
    assert end == len(text.strip()), f"bad time span {text!r}"
    return total


def exec_start_argv(value: str) -> list[str]:
    """The argv of an ``ExecStart=`` value: prefixes (``-@:+!``) dropped, specifiers
    expanded as systemd would on a host named ``host`` (instance ``1``)."""
    value = value.lstrip("-@:+!")
    specifiers = {"%%": "%", "%H": "host", "%l": "host", "%i": "1", "%I": "1", "%n": "unit"}
    unknown = set(re.findall(r"%.?", value)) - set(specifiers)
    assert not unknown, f"specifiers this test does not expand in ExecStart: {unknown}"
    return shlex.split(re.sub(r"%.", lambda m: specifiers[m[0]], value))


def doc_units() -> list[tuple[str, str]]:
    """The units shown in the how-to pages: (where, text)."""
    found = []
    block = re.compile(r"^```text\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
    for page in UNIT_PAGES:
        text = page.read_text(encoding="utf-8")
        for match in block.finditer(text):
            first = match["code"].splitlines()[0]
            if first.startswith("# /etc/systemd/system/"):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.name}:{line}", match["code"]))
    return found


UNITS = [("examples/systemd/alkstore-worker.service", EXAMPLE_UNIT.read_text("utf-8"))]
UNITS += doc_units()


def test_issue6_the_docs_show_the_units_this_test_checks():
    names = [where for where, _ in UNITS]
    assert len(names) >= 3, names  # the example and one unit in each how-to page
    assert {where.split(":")[0] for where in names[1:]} == {p.name for p in UNIT_PAGES}


@pytest.mark.parametrize(("where", "text"), UNITS, ids=[where for where, _ in UNITS])
def test_issue6_unit_keeps_the_graceful_stop_contract(where, text):
    unit = parse_unit(text, where)
    exec_start = unit.one("Service", "ExecStart")
    assert exec_start is not None, f"{where}: no ExecStart="
    argv = exec_start_argv(exec_start)

    # A real worker command line, which our own parser accepts.
    assert Path(argv[0]).name == "alkstore-trio", argv
    assert Path(argv[0]).is_absolute(), f"{where}: systemd needs an absolute path: {argv[0]}"
    assert argv[1] == "worker", argv
    assert not any(arg == "--dsn" or arg.startswith("--dsn=") for arg in argv), (
        f"{where}: the DSN belongs in EnvironmentFile=, not on the command line"
    )
    try:
        args = build_parser({"ALKSTORE_DSN": SOME_DSN}).parse_args(argv[1:])
    except SystemExit:  # argparse printed why on stderr
        pytest.fail(f"{where}: alkstore-trio rejects ExecStart: {shlex.join(argv)}")
    assert args.command == "worker"
    assert args.queues or args.tasks_specs, f"{where}: a worker needs --tasks or a --queue"

    # The DSN comes from a file only root and the service can read.
    assert unit.values("Service", "EnvironmentFile"), f"{where}: no EnvironmentFile="
    for value in unit.values("Service", "Environment"):
        assert "ALKSTORE_DSN" not in value, f"{where}: the DSN is set in the unit itself"
    assert unit.one("Service", "WorkingDirectory"), (
        f"{where}: no WorkingDirectory= (where --tasks and --queue modules are imported from)"
    )

    # Stopping: the graceful signal, time for the grace and the release, a cgroup kill.
    kill_signal = unit.one("Service", "KillSignal") or "SIGTERM"
    assert signal.Signals[kill_signal] in STOP_SIGNALS, f"{where}: KillSignal={kill_signal}"
    timeout = unit.one("Service", "TimeoutStopSec")
    assert timeout is not None, f"{where}: no TimeoutStopSec= (the default 90 s is a guess)"
    assert time_span_s(timeout) >= args.shutdown_grace_s + RELEASE_MARGIN_S, (
        f"{where}: TimeoutStopSec={timeout} leaves less than {RELEASE_MARGIN_S:g}s "
        f"after --shutdown-grace-s {args.shutdown_grace_s:g} to release the jobs"
    )
    kill_mode = unit.one("Service", "KillMode") or "control-group"
    assert kill_mode in ("mixed", "control-group"), f"{where}: KillMode={kill_mode}"
    assert (unit.one("Service", "SendSIGKILL") or "yes") != "no"

    # Starting and restarting.
    service_type = unit.one("Service", "Type") or "simple"
    assert service_type in ("notify", "exec", "simple"), f"{where}: Type={service_type}"
    watchdog = unit.one("Service", "WatchdogSec")
    if watchdog is not None and time_span_s(watchdog) > 0:
        assert service_type == "notify", f"{where}: WatchdogSec= needs Type=notify"
        assert time_span_s(watchdog) >= 10, f"{where}: WatchdogSec={watchdog} is too short"
    assert unit.one("Service", "Restart") == "on-failure", f"{where}: Restart="
    prevented = " ".join(unit.values("Service", "RestartPreventExitStatus")).split()
    assert "2" in prevented, f"{where}: status 2 (usage error) must not restart in a loop"


def test_issue6_the_example_unit_is_sandboxed_without_cutting_the_worker_off():
    unit = parse_unit(EXAMPLE_UNIT.read_text("utf-8"), EXAMPLE_UNIT.name)
    assert unit.one("Service", "NoNewPrivileges") == "yes"
    assert unit.one("Service", "ProtectSystem") == "strict"
    assert unit.one("Service", "PrivateTmp") == "yes"
    assert unit.one("Service", "User") not in (None, "root")
    families = " ".join(unit.values("Service", "RestrictAddressFamilies")).split()
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(families), families
    assert not any(f.startswith("~") for f in families)
    # A filtered system call must fail, not kill the worker in the middle of a job.
    assert unit.one("Service", "SystemCallErrorNumber") == "EPERM"


def test_issue6_the_graceful_example_runs_a_worker_command_the_parser_accepts():
    """The example that plays systemd stops the same command, with a shorter grace."""
    path = ROOT / "examples" / "graceful_shutdown.py"
    spec = importlib.util.spec_from_file_location("graceful_shutdown_example", path)
    assert spec is not None
    assert spec.loader is not None
    graceful_shutdown = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graceful_shutdown)
    command = graceful_shutdown.worker_command()
    assert command[1:4] == ["-m", "alkstore_trio", "worker"]
    args = build_parser({"ALKSTORE_DSN": SOME_DSN}).parse_args(command[3:])
    assert args.shutdown_grace_s == graceful_shutdown.GRACE_S
    assert args.shutdown_grace_s + RELEASE_MARGIN_S <= graceful_shutdown.TIMEOUT_STOP_S


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45", 45.0), ("45s", 45.0), ("1min 30s", 90.0), ("2m", 120.0), ("1h", 3600.0)],
)
def test_issue6_time_spans_are_read_as_systemd_reads_them(text, seconds):
    assert time_span_s(text) == seconds


def test_issue6_the_unit_parser_reads_continuations_and_rejects_a_bad_unit():
    unit = parse_unit("[Service]\n# c\nExecStart=/x \\\n    a \\\n# inside\n    b\n", "t")
    (exec_start,) = unit.values("Service", "ExecStart")
    assert exec_start_argv(exec_start) == ["/x", "a", "b"]
    assert exec_start_argv("-/x --worker-id %H-%i 100%%") == ["/x", "--worker-id", "host-1", "100%"]
    with pytest.raises(AssertionError):
        parse_unit("[Service]\nnot a setting\n", "t")
    with pytest.raises(AssertionError):
        exec_start_argv("/x --worker-id %Z")
    with pytest.raises(AssertionError):
        time_span_s("45 parsecs")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is absent")
def test_issue6_systemd_itself_accepts_the_example_unit(tmp_path, console_script):
    # systemd checks that ExecStart's program exists: point it at the installed command.
    text = EXAMPLE_UNIT.read_text("utf-8").replace(
        "/srv/app/.venv/bin/alkstore-trio", console_script
    )
    unit = tmp_path / EXAMPLE_UNIT.name
    unit.write_text(text, encoding="utf-8")
    result = subprocess.run(
        ["systemd-analyze", "verify", unit.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # An unknown or malformed directive is only a warning ("..., ignoring."), naming
    # the file; warnings about the system's own units are not this test's business.
    ours = [line for line in result.stderr.splitlines() if unit.name in line]
    assert ours == [], "\n".join(ours)
