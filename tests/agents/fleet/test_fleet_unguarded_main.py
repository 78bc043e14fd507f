"""A process fleet started by a script without the ``if __name__ == '__main__':`` guard.

Under ``spawn`` and ``forkserver`` every worker imports the main module; a script that
starts its fleet at module level starts it again there. The worker must end at once,
and the script's own fleet must raise a FleetError that says what happened and how to
fix it, with every worker stopped and no shared-memory segment leaked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """\
from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.workloads import get_workload

fleet = make_fleet(
    "CartPole-v1",
    backend="process",
    max_actors=2,
    context={context!r},
    startup_timeout=120,
    actor_timeout=120,
)
weights = get_workload("CartPole-v1").make_policy().get_weights()
result = fleet.run_round(weights, num_actors=2, steps_per_actor=8)
print("ROUND", result.complete, len(result.trajectories))
fleet.close()
"""


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train_script.py"
    path.write_text(script)
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
        check=False,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_unguarded_script_gets_a_clear_fleet_error(tmp_path: Path, context: str) -> None:
    proc = _run(SCRIPT.format(context=context), tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "ROUND" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fleetgym.errors.FleetError: a worker process of the fleet"), last
    assert "train_script.py" in last and "if __name__ == '__main__':" in last
    # The multiprocessing bootstrap error never shows: the worker ended before it.
    assert "bootstrapping phase" not in proc.stderr
    assert "leaked shared_memory" not in proc.stderr
    assert not list((tmp_path / "tmp").glob("fleetgym-unguarded-main-*")), "report left"


@pytest.mark.timeout(300)
def test_the_guarded_script_runs(tmp_path: Path) -> None:
    guarded = "if __name__ == '__main__':\n" + textwrap.indent(
        SCRIPT.format(context="spawn"), "    "
    )
    proc = _run(guarded, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ROUND True 2" in proc.stdout
    assert "leaked shared_memory" not in proc.stderr
