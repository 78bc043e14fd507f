"""Registers fleetgym/NetShim-<env>-<profile>-v0 IDs for the RL Zoo (``--gym-packages``).

One ID per inner env and profile: the Zoo makes its evaluation env from the ID and the
command line's ``--env-kwargs`` alone, so an ID that needs ``env_kwargs`` from the
hyperparameter file cannot be evaluated; these IDs need none. Run from the repository root::

    PYTHONPATH=examples/zoo python -m rl_zoo3.train --algo ppo --gym-packages shim_ids \\
        --env fleetgym/NetShim-CartPole-v1-wifi-normal-v0 -conf examples/zoo/ppo_shim_ids.yml
"""

from fleetgym import register_shim_env

for profile in ("wifi-normal", "wifi-degraded"):
    register_shim_env("CartPole-v1", profile)
    register_shim_env("Pendulum-v1", profile)
