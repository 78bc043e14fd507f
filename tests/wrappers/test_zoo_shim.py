"""The RL Zoo's training entry point on the example hyperparameter files in examples/zoo.

Each test runs ``python -m rl_zoo3.train`` for a few hundred steps; skipped where the Zoo
is not installed (``pip install rl_zoo3``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ZOO_EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "zoo"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("rl_zoo3") is None,
    reason="rl_zoo3 is not installed (pip install rl_zoo3): the RL Zoo tests need it",
)


def zoo_train(tmp_path: Path, *args: str, extra_path: Path | None = None) -> Path:
    """Run the Zoo's training entry point; return its log folder."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    log = tmp_path / "logs"
    cmd = [sys.executable, "-m", "rl_zoo3.train", *args, "-f", str(log), "--seed", "0"]
    cmd += ["--num-threads", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=220, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return log


SMALL = ["-n", "256", "--eval-freq", "128", "--eval-episodes", "1", "--n-eval-envs", "1"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("conf", ["ppo_cartpole_shim.yml", "ppo_cartpole_robust.yml"])
def test_zoo_ppo_cartpole_with_env_wrapper(tmp_path, conf):
    log = zoo_train(
        tmp_path,
        *("--algo", "ppo", "--env", "CartPole-v1", "-conf", str(ZOO_EXAMPLES / conf), *SMALL),
        *("-params", "n_envs:2"),
    )
    # The Zoo found the CartPole-v1 entry (not "default") and logged under that ID.
    run = log / "ppo" / "CartPole-v1_1"
    assert (run / "CartPole-v1" / "config.yml").read_text().count("fleetgym.wrappers") == 1


@pytest.mark.timeout(240)
def test_zoo_shim_id_without_env_kwargs(tmp_path):
    log = zoo_train(
        tmp_path,
        *("--algo", "ppo", "--gym-packages", "shim_ids"),
        *("--env", "fleetgym/NetShim-CartPole-v1-wifi-normal-v0"),
        *("-conf", str(ZOO_EXAMPLES / "ppo_shim_ids.yml"), *SMALL, "-params", "n_envs:2"),
        extra_path=ZOO_EXAMPLES,
    )
    assert (log / "ppo" / "fleetgym-NetShim-CartPole-v1-wifi-normal-v0_1").is_dir()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zoo_sac_hopper_with_env_wrapper(tmp_path):
    pytest.importorskip("mujoco")
    log = zoo_train(
        tmp_path,
        *(
            "--algo",
            "sac",
            "--env",
            "Hopper-v5",
            "-conf",
            str(ZOO_EXAMPLES / "sac_hopper_shim.yml"),
        ),
        *("-n", "200", "--eval-freq", "0", "-params", "learning_starts:100", "batch_size:32"),
    )
    assert (log / "sac" / "Hopper-v5_1").is_dir()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_zoo_ppo_atari_with_env_wrapper(tmp_path):
    pytest.importorskip("ale_py")
    log = zoo_train(
        tmp_path,
        *("--algo", "ppo", "--env", "PongNoFrameskip-v4"),
        *("-conf", str(ZOO_EXAMPLES / "ppo_atari_shim.yml"), "-n", "128", "--eval-freq", "0"),
        *("-params", "n_envs:1", "n_steps:128", "batch_size:64", "n_epochs:1"),
    )
    config = log / "ppo" / "PongNoFrameskip-v4_1" / "PongNoFrameskip-v4" / "config.yml"
    assert "CnnPolicy" in config.read_text()
