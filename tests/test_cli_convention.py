"""One convention for every ``fleetgym`` subcommand and nested action.

The parsers are built by :func:`fleetgym.cli.build_parser` and walked through their
``argparse._SubParsersAction``s, so a subcommand added later is checked too (and must be
classified below as long-running or not):

* ``--seed S`` is one run's seed: an integer option with an integer default;
* ``--seeds N`` (and ``--X-seeds N``) comes with ``--first-seed F`` (``--first-X-seed F``):
  N seeds from F, F an integer option with a default; the help says FIRST..FIRST+N-1;
* ``--out`` is an output folder whose default lies under ``fleetgym-out/<command>``;
* every command that trains, evaluates or measures has ``--no-progress``;
* every option with a default shows it in ``--help``; ``--help`` of each exits 0;
* the ``fleetgym`` command lines shown in README.md, docs/ and examples/ use options
  that exist.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from fleetgym.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Command line (without ``fleetgym``) -> parser, for every (nested) subcommand."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        found[prefix] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(f"{prefix} {name}".strip(), child)

    walk("", build_parser())
    return found


PARSERS = all_parsers()
COMMANDS = sorted(c for c in PARSERS if c)

#: Commands that train, evaluate, simulate or measure for more than a few seconds: each has
#: a progress bar and ``--no-progress``.
LONG_RUNNING = {
    "calf",
    "profiles assess",
    "train",
    "schedule evaluate",
    "schedule train",
    "schedule finetune",
    "schedule search",
    "schedule seeds",
    "lag-sweep",
    "imagination",
    "soak",
    "plan measure",
    "plan validate",
    "plan predict",
    "reproduce",
}
#: The others, each with the reason it has no bar.
SHORT = {
    "profiles": "prints tables (seconds)",
    "profiles fit": "fits one trace (seconds)",
    "profiles simulate": "one ns-3 simulation (seconds), announced on stderr",
    "schedule": "only dispatches to its actions",
    "plan": "only dispatches to its actions",
    "serve-env": "serves until interrupted; --measure N prints one report",
    "docs": "one sphinx-build (about half a minute), then serves until interrupted",
    "calibrate": "one measurement of --budget CPU seconds (3 by default), announced on stderr",
}

#: Counts of seeds that are not "N seeds from F": each is drawn from another option.
DERIVED_SEED_COUNTS = {
    # pools of workload seeds drawn from --seed
    ("schedule train", "--paired-seeds"),
    ("schedule train", "--start-search-seeds"),
    ("schedule seeds", "--paired-seeds"),
    ("schedule seeds", "--start-search-seeds"),
    # the held-out seeds right after the search's: FIRST+N ..
    ("schedule search", "--confirm-seeds"),
}

_SEED_COUNT = re.compile(r"^--(?:([a-z][a-z-]*)-)?seeds$")


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: action for action in parser._actions for opt in action.option_strings}


def option_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help of ``action`` as ``--help`` prints it (defaults appended), on one line."""
    formatter = parser._get_formatter()
    helper = getattr(formatter, "_get_help_string", None)
    text = helper(action) if helper is not None else action.help
    if text is None:
        return ""
    params = dict(vars(action), prog=parser.prog)
    for name in list(params):
        if params[name] is argparse.SUPPRESS:
            del params[name]
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return " ".join((text % params).split())


def renderings(default: Any) -> set[str]:
    """The ways a help text may write ``default``."""
    if isinstance(default, (list, tuple)):
        items = [str(x) for x in default]
        return {" ".join(items), ", ".join(items), str(list(default))}
    shown = {str(default)}
    if isinstance(default, float):
        shown.add(f"{default:g}")
        if math.isfinite(default) and default == int(default):
            shown.add(str(int(default)))
    if isinstance(default, int) and not isinstance(default, bool):
        shown.add(f"{default:,}")
    return shown


def is_int_option(action: argparse.Action) -> bool:
    """Whether the option's type parses an integer and refuses anything else."""
    if action.type is int:
        return True
    if not callable(action.type):
        return False
    try:
        value = action.type("3")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    if not (isinstance(value, int) and value == 3):
        return False
    try:
        action.type("1.5")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return True
    return False


def test_the_walk_reaches_nested_actions() -> None:
    for nested in ("schedule evaluate", "schedule train", "plan measure", "profiles fit"):
        assert nested in PARSERS


def test_every_command_is_classified() -> None:
    """A new subcommand must be listed as long-running (a bar) or short (with a reason)."""
    unclassified = [c for c in COMMANDS if c not in LONG_RUNNING and c not in SHORT]
    assert not unclassified, f"classify in LONG_RUNNING or SHORT: {unclassified}"
    assert not (LONG_RUNNING & set(SHORT))
    assert LONG_RUNNING | set(SHORT) == set(COMMANDS)  # no stale names


@pytest.mark.parametrize("command", sorted(LONG_RUNNING))
def test_long_running_commands_take_no_progress(command: str) -> None:
    action = options(PARSERS[command]).get("--no-progress")
    assert action is not None, f"fleetgym {command}: no --no-progress"
    assert action.nargs == 0 and action.default is False


@pytest.mark.parametrize("command", COMMANDS)
def test_seed_is_one_integer_with_a_default(command: str) -> None:
    action = options(PARSERS[command]).get("--seed")
    if action is None:
        return
    assert is_int_option(action), f"fleetgym {command} --seed: not an integer option"
    assert isinstance(action.default, int) and not isinstance(action.default, bool)
    assert action.nargs is None


@pytest.mark.parametrize("command", COMMANDS)
def test_seed_counts_come_with_their_first_seed(command: str) -> None:
    parser = PARSERS[command]
    opts = options(parser)
    for flag, action in opts.items():
        match = _SEED_COUNT.match(flag)
        if match is None or (command, flag) in DERIVED_SEED_COUNTS:
            continue
        prefix = match.group(1)
        first = "--first-seed" if prefix is None else f"--first-{prefix}-seed"
        assert first in opts, f"fleetgym {command} {flag}: expected {first} beside it"
        assert is_int_option(action), f"fleetgym {command} {flag}: not an integer count"
        first_action = opts[first]
        assert is_int_option(first_action), f"fleetgym {command} {first}: not an integer"
        assert isinstance(first_action.default, int), f"fleetgym {command} {first}: no default"
        shown = option_help(parser, action)
        assert "FIRST..FIRST+N-1" in shown, (
            f"fleetgym {command} {flag}: the help should say the seeds are FIRST..FIRST+N-1: "
            f"{shown!r}"
        )


@pytest.mark.parametrize("command", COMMANDS)
def test_out_is_a_folder_under_fleetgym_out(command: str) -> None:
    parser = PARSERS[command]
    action = options(parser).get("--out")
    if action is None:
        return
    top = command.split()[0]
    assert action.default is not None and not action.required, (
        f"fleetgym {command} --out: expected a default folder"
    )
    parts = Path(str(action.default)).parts
    assert parts[:2] == ("fleetgym-out", top), (
        f"fleetgym {command} --out: expected a default under fleetgym-out/{top}, "
        f"actual {action.default}"
    )
    assert action.nargs is None
    assert str(action.metavar or "") not in ("JSON", "PNG", "CSV", "FILE", "PATH")
    assert "folder" in option_help(parser, action), f"fleetgym {command} --out: say 'folder'"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_default_is_shown_in_the_help(command: str) -> None:
    parser = PARSERS[command]
    for action in parser._actions:
        if not action.option_strings or action.default is argparse.SUPPRESS:
            continue
        if action.nargs == 0 or action.default is None:
            continue  # flags, and options that are off unless given
        shown = option_help(parser, action)
        flag = action.option_strings[-1]
        assert "default" in shown, f"fleetgym {command} {flag}: no default in {shown!r}"
        after = shown[shown.index("default") :]
        assert any(text in after for text in renderings(action.default)), (
            f"fleetgym {command} {flag}: the default {action.default!r} is not in {shown!r}"
        )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_none_default_that_means_something_says_what(command: str) -> None:
    """An option whose absence picks a value (not just "off") names that value."""
    parser = PARSERS[command]
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.default is not None:
            continue
        shown = option_help(parser, action)
        if "default" in shown:
            assert re.search(r"default[^)]*\S", shown), (command, shown)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*command.split(), "--help"])
    assert stop.value.code == 0
    assert f"usage: fleetgym {command}".rstrip() in capsys.readouterr().out


# -- the command lines the documentation shows -----------------------------------------

_FENCE = re.compile(r"```(?:bash|sh|shell|console|text)?\n(.*?)```", re.S)
_INLINE = re.compile(r"`(fleetgym [^`\n]+)`")
_PROMPT = re.compile(r"^(?:\$ |nice -n \d+ |[A-Z_]+=\S+ )*")


def _command_lines(text: str) -> list[str]:
    lines = []
    for block in _FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = _PROMPT.sub("", line.strip())
            if line.startswith("fleetgym "):
                lines.append(line)
    lines += [m for m in _INLINE.findall(text)]
    return lines


def _documented_commands() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "experiments").rglob("*.py"))
    found = []
    for page in pages:
        if page.is_file():
            for line in _command_lines(page.read_text(encoding="utf-8")):
                found.append((page.relative_to(ROOT).as_posix(), line))
    return found


DOCUMENTED = _documented_commands()


def _unknown_options(line: str) -> list[str]:
    """The options of ``line`` its (nested) subcommand does not have ([] if unresolvable)."""
    line = re.split(r"\s+#\s", line)[0]
    try:
        tokens = shlex.split(line)[1:]
    except ValueError:
        return []
    path: list[str] = []
    while tokens and " ".join([*path, tokens[0]]) in PARSERS:
        path.append(tokens.pop(0))
    if not path:
        return []
    parser = PARSERS[" ".join(path)]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions) and tokens:
        if not tokens[0].startswith("-") and " ".join(path) not in ("profiles",):
            return []  # prose such as "schedule evaluate|train": nothing to check
    opts = options(parser)
    known = set(opts) | {"--help", "-h"}
    wrong = [
        t.split("=")[0]
        for t in tokens
        if t.startswith("--") and t.split("=")[0] not in known and t != "--"
    ]
    # A switch given a value (``--save runs/x.pt`` after --save became a switch): the value
    # would be an unrecognised argument where the command takes no positional.
    positional = any(not a.option_strings for a in parser._actions)
    for flag, value in zip(tokens, tokens[1:], strict=False):
        action = opts.get(flag)
        if action is not None and action.nargs == 0 and not value.startswith("-"):
            if not positional:
                wrong.append(f"{flag} {value}")
    return wrong


def test_the_documentation_shows_command_lines() -> None:
    assert len(DOCUMENTED) > 50


@pytest.mark.parametrize("where,line", DOCUMENTED, ids=[f"{w}: {x[:60]}" for w, x in DOCUMENTED])
def test_documented_command_lines_use_existing_options(where: str, line: str) -> None:
    unknown = _unknown_options(line)
    assert not unknown, f"{where}: {line!r} uses options the command does not take: {unknown}"
