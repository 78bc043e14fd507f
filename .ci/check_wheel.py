"""Check a built wheel's file list: the library and the ``fleetgym`` commands, nothing else.

Usage: ``python .ci/check_wheel.py dist/fleetgym-*.whl``. Fails (exit status 1, one line
per problem) if the wheel holds the checkout's ``studies/``, ``tests/``, ``benchmarks/``,
``examples/`` or ``docs/`` folders or a study module moved to ``studies/``, or lacks a data
file a product command reads at run time; prints the lines of Python under
``fleetgym/experiments/`` that it ships.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import PurePosixPath

#: Folders of the checkout that never ship (below the package root ``fleetgym/``).
NOT_SHIPPED_FOLDERS = ("studies", "tests", "benchmarks", "examples", "docs")
#: The finished studies moved from ``experiments/`` to ``studies/`` in 2.0.
MOVED_STUDIES = (
    "calf_recurrent_minigrid.py",
    "mode_parity.py",
    "predictive_figures.py",
    "predictive_hopper.py",
    "stall_actions.py",
)
#: Data files that product commands read at run time: ``fleetgym reproduce``'s learned
#: scheduler, ``fleetgym plan predict``'s default calibration, the shipped trace.
REQUIRED = (
    "fleetgym/experiments/schedule/learned_scheduler_cartpole.zip",
    "fleetgym/experiments/plan/calibration.json",
    "fleetgym/traces/wifi-office.csv",
)


def problems(names: list[str]) -> list[str]:
    """What is wrong with a wheel holding the files ``names`` (empty: nothing)."""
    found = []
    for name in names:
        parts = PurePosixPath(name).parts
        if len(parts) > 1 and parts[0] == "fleetgym" and parts[1] in NOT_SHIPPED_FOLDERS:
            found.append(f"{name}: expected no {parts[1]}/ in the wheel, actual shipped")
        elif parts[-1] in MOVED_STUDIES:
            found.append(f"{name}: expected the study only in studies/, actual shipped")
    present = set(names)
    found += [
        f"{name}: expected in the wheel, actual missing" for name in REQUIRED if name not in present
    ]
    return found


def experiments_lines(archive: zipfile.ZipFile) -> tuple[int, int, int]:
    """Lines of Python under ``fleetgym/experiments/``, of all Python, and files counted."""
    experiments = total = files = 0
    for name in archive.namelist():
        if not name.endswith(".py"):
            continue
        lines = len(archive.read(name).decode("utf-8").splitlines())
        total += lines
        if name.startswith("fleetgym/experiments/"):
            experiments += lines
            files += 1
    return experiments, total, files


def main(argv: list[str]) -> int:
    """Check the wheel ``argv[0]``; 0 if it is clean, 1 otherwise, 2 on a usage error."""
    if len(argv) != 1 or not argv[0].endswith(".whl"):
        print(f"usage: expected one WHEEL.whl argument, actual {argv}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(argv[0]) as archive:
        found = problems(archive.namelist())
        experiments, total, files = experiments_lines(archive)
    share = 100.0 * experiments / total if total else 0.0
    print(
        f"wheel ships {experiments} lines of fleetgym/experiments/ ({files} files, "
        f"{share:.1f} % of its {total} lines of Python)"
    )
    for problem in found:
        print(f"wheel file list: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
