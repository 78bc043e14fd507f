"""``fleetgym calf`` at tiny budgets."""

from __future__ import annotations

import pytest

from fleetgym.cli import main as cli_main


def test_cli_calf_quick(tmp_path, capsys):
    code = cli_main(
        [
            "calf",
            "--quick",
            "--timesteps",
            "256",
            "--episodes",
            "2",
            "--regimes",
            "baseline",
            "--conditions",
            "sim-clean,wifi-normal",
            "--no-ablation",
            "--variants",
            "",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "# CALF on CartPole-v1" in out and "wrote" in out
    assert (tmp_path / "calf_CartPole-v1_summary.csv").exists()


def test_cli_calf_bad_arguments_end_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # an argparse usage error
        cli_main(["calf", "--seeds", "0", "--out", str(tmp_path), "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--seeds: expected an integer >= 1" in err and len(err.strip().splitlines()) == 1
