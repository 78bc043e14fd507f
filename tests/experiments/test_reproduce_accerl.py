"""``fleetgym reproduce --only accerl`` at a tiny scale: the real comparison and lag sweep,
a few hundred env steps each, and the report's tables and figures."""

from __future__ import annotations

import pytest

from fleetgym import cli
from fleetgym.experiments import reproduce


@pytest.mark.timeout(300)
def test_accerl_part_writes_its_tables_and_figures(tmp_path, monkeypatch):
    tiny = dict(
        kinds=["heterogeneous"],
        seeds=1,
        steps=64,
        lag_sweep=["--quick", "--steps", "96", "--lags", "0", "2", "--seeds", "1"],
    )
    monkeypatch.setitem(reproduce.ACCERL_SCALES, "quick", tiny)
    argv = ["reproduce", "--only", "accerl", "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv) == 0
    report = (tmp_path / "report.md").read_text()
    assert "Command: `fleetgym reproduce --only accerl`." in report
    assert "## Asynchronous training (AcceRL)" in report
    for trainer in ("sync-default", "sync-threads", "async"):
        assert f"| heterogeneous | {trainer} | 8 |" in report
    assert "| heterogeneous | 8 | async | sync-default |" in report  # the paired ratios
    assert "### Final return against an injected policy lag" in report
    assert "| ppo | compensated |" in report and "| gipo-0.8 | compensated |" in report
    assert "**This run (live, short):**" in report
    assert "**The committed grid (not rerun here):** Hopper-v5" in report
    for png in ("accerl/overlap/async_compare.png", "accerl/lag/lag_sweep.png"):
        assert f"]({png})" in report and (tmp_path / png).stat().st_size > 0
    assert "- accerl: " in report  # its wall time


def test_accerl_is_a_part(capsys):
    assert cli.main(["reproduce", "--only", "calf,lag"]) == 2
    assert "--only: expected names of calf, schedule, accerl" in capsys.readouterr().err
