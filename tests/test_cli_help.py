"""Every ``fleetgym`` subcommand explains itself: a description, each option's default, no
reStructuredText markup and no unexplained jargon in ``--help``; usage errors exit 2."""

from __future__ import annotations

import argparse
import re

import pytest

from fleetgym.cli import build_parser, main

#: Paper notation that must come with a definition wherever a help text uses it.
JARGON = {"I_max": "most actors", "regime": "network a policy trains under"}


def all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) of the top level and every (nested) subcommand."""
    found = []

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        found.append((prefix, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(f"{prefix} {name}", child)

    walk("fleetgym", build_parser())
    return found


PARSERS = all_parsers()


def option_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help is not None else ""


@pytest.mark.parametrize("command,parser", PARSERS, ids=[c for c, _ in PARSERS])
def test_help_shows_description_and_every_default(command, parser):
    text = parser.format_help()
    assert parser.description, f"{command}: no description"
    assert "``" not in text and not re.search(r":\w+:`", text), f"{command}: RST in --help"
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.default is argparse.SUPPRESS:
            continue  # positionals, flags, --help/--version
        shown = " ".join(option_help(parser, action).split())
        assert shown, f"{command} {action.option_strings[0]}: no help"
        if action.default is None:
            continue  # "not given" (a None default that stands for a value says so itself)
        assert "default" in shown, (
            f"{command} {action.option_strings[0]}: the default is not shown: {shown!r}"
        )


@pytest.mark.parametrize("command,parser", PARSERS, ids=[c for c, _ in PARSERS])
def test_jargon_is_defined_where_used(command, parser):
    text = " ".join(parser.format_help().split())
    for word, definition in JARGON.items():
        if word in text:
            assert definition in text, f"{command}: {word!r} used without a definition"


def test_top_level_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for line in ("0 ", "1 ", "2 ", "3 ", "130 "):
        assert f"\n  {line}" in out
    assert "The fleetgym command" in out


def test_a_command_without_its_action_prints_its_help(capsys):
    assert main(["schedule"]) == 2
    out = capsys.readouterr().out
    assert "evaluate" in out and "finetune" in out and "usage: fleetgym schedule" in out


def test_reproduce_only_unknown_part_is_a_usage_error(capsys):
    assert main(["reproduce", "--only", "foo"]) == 2
    assert "--only" in capsys.readouterr().err


def test_profiles_shows_nominal_values_and_labels_measured_ones(capsys):
    assert main(["profiles", "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "measured" in out and "nominal" in out
    # wifi-normal loses 2 % by definition: the nominal value is printed as 2.0 %.
    assert "2.0%" in rows["wifi-normal"]
    # Both directions alike: one row; different: an up and a down row.
    assert " both " in rows["wifi-normal"]
    assert " up " in rows["wifi-degraded-uplink"]
    assert any(line.split()[:1] == ["down"] for line in out.splitlines())
