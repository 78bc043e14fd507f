"""The ``fleetgym`` command: dispatch, help, and ``reproduce`` at a tiny budget."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleetgym import cli


def test_every_subcommand_configures_and_has_help(capsys):
    parser = cli.build_parser()
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--help"])
        assert exc.value.code == 0
        assert name in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_python_dash_m_reports_version():
    out = subprocess.run(
        [sys.executable, "-m", "fleetgym", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("fleetgym ")


def test_reproduce_rejects_unknown_part(capsys):
    assert cli.main(["reproduce", "--only", "calf,lag"]) == 2
    err = capsys.readouterr().err
    assert "--only: expected names of calf, schedule" in err and len(err.splitlines()) == 1


def test_reproduce_writes_report_with_calf_table(tmp_path, monkeypatch):
    from fleetgym.experiments.calf import experiment

    # The real experiment, at a budget a unit test can afford: the part's own regimes
    # include the clean policy with the compensation that works (baseline+best).
    real = experiment.run_calf
    asked = []

    def tiny(env, **kwargs):
        asked.append(kwargs["regimes"])
        kwargs.update(
            timesteps=256,
            episodes=1,
            regimes=["baseline", "baseline+best"],
            conditions=["sim-clean", "wifi-normal"],
            ablation=False,
            variants=[],
        )
        return real(env, **kwargs)

    monkeypatch.setattr(experiment, "run_calf", tiny)
    assert cli.main(["reproduce", "--only", "calf", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "baseline+best" in asked[0] and "net-aware+comp" in asked[0]
    report = (tmp_path / "report.md").read_text()
    assert "## Network shim: the CALF experiment (CartPole-v1)" in report
    assert "wifi-normal" in report and "| baseline+best |" in report
    assert "](calf/" in report
    assert (tmp_path / "calf").is_dir() and any((tmp_path / "calf").glob("*.png"))
