"""``pip install fleetgym`` without extras: the core works, the rest names its extra.

Each check runs in a fresh interpreter that cannot import the optional packages (a
meta-path finder hides them), so it holds both here, with every extra installed, and in
CI's core-only environment, where they are really absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fleetgym.extras import OPTIONAL_MODULES

#: Run first in every child: optional packages cannot be imported.
HIDE_EXTRAS = textwrap.dedent(
    f"""
    import importlib.abc, sys
    HIDDEN = {sorted(OPTIONAL_MODULES)!r}

    class _Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, _Hide())
    """
)


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_EXTRAS + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_core_imports_registers_every_id_and_runs_the_shim():
    done = _run(
        """
        import json
        import gymnasium as gym
        import fleetgym, fleetgym.wrappers, fleetgym.traces, fleetgym.wrappers.remote
        import fleetgym.meta_env, fleetgym.agents
        from fleetgym.registration import ENV_SPECS

        env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")
        env.reset(seed=0)
        for _ in range(20):
            env.step(env.action_space.sample())
        robust = fleetgym.wrappers.make_robust_env("CartPole-v1", profile="wifi-normal")
        robust.reset(seed=0)
        robust.step(robust.action_space.sample())
        print(json.dumps({
            "registered": sorted(i for i in ENV_SPECS if i in gym.registry),
            "torch": "torch" in sys.modules,
            "version": fleetgym.__version__,
        }))
        """
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    from fleetgym import __version__
    from fleetgym.registration import ENV_SPECS

    assert report == {"registered": sorted(ENV_SPECS), "torch": False, "version": __version__}


@pytest.mark.parametrize(
    ("code", "extra"),
    [
        ("from fleetgym.agents.learners import AsyncPPO", "agents"),
        ("from fleetgym.agents.policies import ActorCriticPolicy", "agents"),
        ("from fleetgym.agents.world_model import WorldModel", "agents"),
        ("from fleetgym.agents.tokens import TokenPolicy", "agents"),
        (
            "import gymnasium as gym, fleetgym\n"
            "gym.make('fleetgym/ActorScheduling-v0', workload='CartPole-v1')",
            "agents",
        ),
        (
            "from fleetgym.agents.fleet import make_fleet\n"
            "make_fleet('CartPole-v1', backend='inprocess', max_actors=2)",
            "agents",
        ),
        (
            "from fleetgym.wrappers import make_robust_env\n"
            "make_robust_env('MiniGrid-Empty-5x5-v0', profile='wifi-normal')",
            "minigrid",
        ),
        (
            "import gymnasium as gym, fleetgym\n"
            "gym.make('fleetgym/NetShim-v0', env_id='ALE/Pong-v5', profile='wifi-normal')",
            "atari",
        ),
    ],
)
def test_a_feature_without_its_extra_names_the_extra(code, extra):
    done = _run(
        f"""
        from fleetgym.errors import DependencyNotInstalled
        try:
            {code.replace(chr(10), chr(10) + " " * 12)}
        except DependencyNotInstalled as error:
            print("EXTRA", error.extra, "|", error)
        else:
            print("NO ERROR")
        """
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(f"EXTRA {extra} |"), last
    assert f'pip install "fleetgym[{extra}]"' in last


def test_cli_help_works_and_a_command_without_its_extra_exits_2_naming_it():
    done = _run(
        """
        import contextlib, io
        from fleetgym.cli import main
        for argv in (["--help"], ["train", "--help"], ["calf", "--help"]):
            try:
                main(argv)
            except SystemExit as stop:
                assert stop.code == 0, (argv, stop.code)
        print("EXIT", main(["train", "--workload", "CartPole-v1", "--rounds", "1"]))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "EXIT 2"
    assert 'pip install "fleetgym[agents]"' in done.stderr
    assert "Traceback" not in done.stderr


def test_importing_any_module_without_its_extra_names_the_extra():
    """Every library module (the CLI's studies included) imports, or raises
    DependencyNotInstalled naming its extra: never a bare ModuleNotFoundError."""
    done = _run(
        """
        import importlib, json, pkgutil
        import fleetgym
        from fleetgym.errors import DependencyNotInstalled

        outside = {"tests", "benchmarks", "examples", "studies", "docs", "build", "setup"}
        report = {"imported": 0, "named": {}, "bare": []}
        for info in pkgutil.walk_packages(fleetgym.__path__, "fleetgym."):
            parts = info.name.split(".")
            if parts[1] in outside or parts[-1] == "__main__":
                continue
            try:
                importlib.import_module(info.name)
                report["imported"] += 1
            except DependencyNotInstalled as error:
                report["named"][info.name] = error.extra
            except ModuleNotFoundError as error:
                report["bare"].append(f"{info.name}: {error}")
        print(json.dumps(report))
        """
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["bare"] == []
    assert report["imported"] > 50  # the core: wrappers, traces, meta_env's models
    assert report["named"], "nothing needed an extra: the optional packages were not hidden"
    assert set(report["named"].values()) <= {"agents", "sb3", "tokens", "ray", "plots"}
