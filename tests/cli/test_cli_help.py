"""Every ``--help`` of ``alkstore-trio`` is written for its users (issue 6): no design
ids of the project's own notes (D24, Q7, R7), an example in every command's help, a
help text on every option, and one name for one idea, the old names still accepted."""

from __future__ import annotations

import argparse
import re

import pytest

from alkstore_trio._cli import build_parser, main

#: The project's design ids, meaningless to a user reading ``--help``.
DESIGN_ID = re.compile(r"\b[DQR]\d+\b")


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (sub)command as ``(path, parser)``, groups (``jobs``, ``dead``) included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(build_parser(environ={})))


def _help(capsys, path: tuple[str, ...]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_cli_help_walk_finds_every_command():
    leaves = {" ".join(path) for path in COMMANDS}
    assert {"demo", "migrate", "worker", "stats", "jobs show", "dead purge", "sweep"} <= leaves


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda path: " ".join(path) or "top")
def test_cli_help_has_no_design_ids_and_an_example(capsys, path):
    text = _help(capsys, path)
    assert not DESIGN_ID.findall(text), text
    assert re.search(r"^examples?:$", text, re.MULTILINE), text
    assert "alkstore-trio " + " ".join(path) in text.partition("example")[2]


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda path: " ".join(path) or "top")
def test_cli_help_explains_every_option(path):
    parser = COMMANDS[path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"alkstore-trio {' '.join(path)} {name} has no help"
        assert action.help is not argparse.SUPPRESS, name


@pytest.mark.parametrize(
    ("path", "old", "new", "value"),
    [
        (("dead", "purge"), "--older-than", "--older-than-s", "60"),
        (("sweep",), "--retention-s", "--older-than-s", "60"),
        (("stats",), "--interval", "--interval-s", "0.5"),
        (("demo",), "--workers", "--concurrency", "8"),
    ],
)
def test_cli_old_option_names_are_aliases_of_the_new(path, old, new, value):
    parser = build_parser(environ={"ALKSTORE_DSN": "postgresql://u@h/db"})
    with_old = parser.parse_args([*path, old, value])
    with_new = parser.parse_args([*path, new, value])
    assert vars(with_old) == vars(with_new)
    action = next(a for a in COMMANDS[path]._actions if new in a.option_strings)
    assert action.option_strings[0] == new  # the new name is the one shown first
    assert old in action.option_strings


@pytest.mark.parametrize(
    ("one_idea", "name"),
    [
        ("seconds dead before deletion", "--older-than-s"),
        ("handlers running at once", "--concurrency"),
    ],
)
def test_cli_one_name_for_one_idea_across_commands(one_idea, name):
    users = [
        path
        for path, parser in COMMANDS.items()
        if any(name in a.option_strings for a in parser._actions)
    ]
    assert len(users) >= 2, f"{one_idea}: {name} is used by {users} only"
