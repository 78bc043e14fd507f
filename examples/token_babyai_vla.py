"""BabyAI with image + instruction: a LoRA-tuned token policy against an MLP PPO baseline.

``token``: ``TokenPPO`` with a policy from ``TokenPolicy.from_pretrained``: a tiny randomly
initialised Llama (hidden 64, 2 layers, vocabulary 32,000) and a SigLIP-style vision tower
(hidden 32, 1 layer, 8x8 frame of 4x4 patches) are written with ``save_pretrained`` into a
temporary folder and loaded back by path (nothing downloaded). The prompt is
``[4 image tokens] [direction] [8 instruction ids] -> 1 action token of 7 bins``: the 7x7x3
grid through the tower and its projector, the mission through an
:class:`~fleetgym.agents.tokens.InstructionTokenizer` (``tokenizers``, BabyAI's words).
LoRA (rank 8 on ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``) on the frozen Llama; the
slim head, the projections, the tower and the value head train.

``mlp``: SB3's PPO (MLP 64x64) on the same observation as a vector: the grid, the
direction and the mission as a bag of BabyAI's words (multi-hot), with the token runs'
rollout size, minibatch, epochs, learning rate, gamma, lambda and clip.

Success is reward > 0 (the goal reached within the step limit): the last 100 training
episodes, and 50 sampled episodes on seeds 10000-10049. Writes ``runs.csv`` and
``curves.csv`` under ``--out`` (rows are appended, so runs can be split across processes).
``random`` (no training) evaluates the uniform policy over the 7 actions the same way.
``--plot DIR ...`` draws the training curves of finished folders into ``--out``.

    nice -n 10 python examples/token_babyai_vla.py --env BabyAI-GoToLocalS5N2-v0 \
        --policies token mlp --seeds 0 1 2 3 4 --steps 30000 --out fleetgym-out/token_babyai_vla
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import minigrid  # noqa: F401  (registers BabyAI)
import numpy as np
import torch
from tqdm import tqdm

from fleetgym.agents.learners import TokenPPO
from fleetgym.agents.tokens import (
    InstructionTokenizer,
    LoraConfig,
    TokenHeadConfig,
    TokenPolicy,
    VisionConfig,
)

EVAL_SEED, VOCAB = 10_000, 32_000
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def write_checkpoint(folder: Path, seed: int) -> None:
    """A tiny random Llama at the root and a SigLIP tower under vision/ (save_pretrained)."""
    from transformers import LlamaConfig, LlamaForCausalLM, SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(seed)
    llama = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        tie_word_embeddings=False,
    )  # fmt: skip
    LlamaForCausalLM(llama).save_pretrained(folder)
    tower = SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=8, patch_size=4, num_channels=3, vision_use_head=False,
    )  # fmt: skip
    SiglipVisionModel(tower).save_pretrained(folder / "vision")


def token_run(env_id: str, seed: int, steps: int, progress: bool) -> tuple[TokenPPO, list]:
    words = InstructionTokenizer()
    folder = Path(tempfile.mkdtemp(prefix="tiny_vla_"))
    write_checkpoint(folder, seed)

    def factory(spec):
        return TokenPolicy.from_pretrained(
            folder, obs_dim=spec.obs_dim, tokenizer=spec.tokenizer,
            head=TokenHeadConfig(
                instruction_length=spec.instruction_length, max_steps=spec.max_steps
            ),
            vision=VisionConfig(image_shape=(7, 7, 3)),
            lora=LoraConfig(rank=8, targets=LORA_TARGETS),
        )  # fmt: skip

    model = TokenPPO(
        env_id, seed=seed, policy_factory=factory, vocabulary=words, vocab_size=VOCAB,
        normalize_reward=False,
    )  # fmt: skip
    curve, recent = [], []
    with tqdm(total=steps, disable=not progress, desc=f"token s{seed}") as bar:
        while model.env_steps < steps:
            rollout = model.collector.collect(model.policy, model.config.n_steps)
            stats = model.update(rollout)
            recent = (recent + [float(r > 0) for r in rollout.episode_returns])[-100:]
            curve.append((stats.env_steps, float(np.mean(recent)) if recent else 0.0))
            bar.update(rollout.env_steps)
    return model, curve


def bag_of_words(mission: str, index: dict[str, int]) -> np.ndarray:
    v = np.zeros(len(index), np.float32)
    for w in mission.lower().replace(",", " ").split():
        v[index[w]] = 1.0
    return v


class VectorObs(gym.ObservationWrapper):
    """BabyAI's image, direction and mission (bag of words) as one Box vector."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.index = {w: i for i, w in enumerate(InstructionTokenizer().words)}
        size = 147 + 1 + len(self.index)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def observation(self, obs):
        parts = [obs["image"].ravel().astype(np.float32), np.array([obs["direction"]], np.float32)]
        return np.concatenate(parts + [bag_of_words(obs["mission"], self.index)])


def mlp_run(env_id: str, seed: int, steps: int, progress: bool):
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = make_vec_env(lambda: VectorObs(gym.make(env_id)), n_envs=8, seed=seed)
    norm = VecNormalize(venv, gamma=0.99, norm_reward=False)
    model = PPO(
        "MlpPolicy", norm, n_steps=64, batch_size=128, n_epochs=4, learning_rate=3e-4,
        gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, seed=seed, device="cpu",
    )  # fmt: skip
    curve: list = []

    class Track(BaseCallback):
        recent: list[float] = []

        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                if done:
                    r = info.get("episode", {}).get("r", 0.0)
                    self.recent = (self.recent + [float(r > 0)])[-100:]
            return True

        def _on_rollout_end(self) -> None:
            curve.append((self.num_timesteps, float(np.mean(self.recent or [0.0]))))
            bar.update(self.num_timesteps - bar.n)

    with tqdm(total=steps, disable=not progress, desc=f"mlp s{seed}") as bar:
        model.learn(steps, callback=Track())
    return model, norm, curve


def evaluate_token(model: TokenPPO, episodes: int) -> np.ndarray:
    return np.array(model.evaluate(episodes, seed=EVAL_SEED, deterministic=False))


def evaluate_mlp(env_id: str, model, norm, episodes: int) -> np.ndarray:
    returns = []
    for e in range(episodes):
        env = VectorObs(gym.make(env_id))
        obs, _ = env.reset(seed=EVAL_SEED + e)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(norm.normalize_obs(obs[None]), deterministic=False)
            obs, r, term, trunc, _ = env.step(int(action[0]))
            total, done = total + float(r), bool(term or trunc)
        returns.append(total)
    return np.array(returns)


def random_returns(args: argparse.Namespace, seed: int) -> np.ndarray:
    rng, returns = np.random.default_rng(seed), []
    for e in range(args.eval_episodes):
        env = gym.make(args.env)
        env.reset(seed=EVAL_SEED + e)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(int(rng.integers(7)))
            total, done = total + float(r), bool(term or trunc)
        returns.append(total)
    return np.array(returns)


def plot(folders: list[Path], target: Path) -> None:
    """Training success (last 100 episodes) against env steps, a panel per folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(folders), figsize=(5.5 * len(folders), 4), squeeze=False)
    for ax, folder in zip(axes[0], folders, strict=True):
        with open(folder / "curves.csv") as f:
            rows = list(csv.DictReader(f))
        for i, policy in enumerate(("token", "mlp")):
            seeds = sorted({r["seed"] for r in rows if r["policy"] == policy})
            for seed in seeds:
                mine = [r for r in rows if (r["policy"], r["seed"]) == (policy, seed)]
                x = [int(r["env_steps"]) for r in mine]
                y = [float(r["success_last100"]) for r in mine]
                label = {"token": "token policy (LoRA)", "mlp": "MLP PPO"}[policy]
                ax.plot(x, y, f"C{i}", alpha=0.7, label=label if seed == seeds[0] else None)
        ax.set_title(rows[0]["env"])
        ax.set_xlabel("env steps")
        ax.set_ylim(0, 1.02)
    axes[0][0].set_ylabel("training success (last 100 episodes)")
    axes[0][0].legend()
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=90)


def append(path: Path, rows: list[dict]) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="BabyAI-GoToLocalS5N2-v0")
    p.add_argument(
        "--policies", nargs="+", default=["token", "mlp"], choices=["token", "mlp", "random"]
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/token_babyai_vla"))
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--plot", nargs="+", type=Path, help="only plot these --out folders' curves")
    args = p.parse_args()
    if args.plot:
        plot(args.plot, args.out / "curves.png")
        return
    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)
    for policy in args.policies:
        for seed in args.seeds:
            cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            if policy == "random":  # no training: uniform over the 7 actions
                returns, env_steps, trainable, curve = random_returns(args, seed), 0, 0, [(0, 0.0)]
            elif policy == "token":
                model, curve = token_run(args.env, seed, args.steps, not args.no_progress)
                returns, env_steps = evaluate_token(model, args.eval_episodes), model.env_steps
                trainable = sum(p.numel() for p in model.policy.parameters() if p.requires_grad)
            else:
                model, norm, curve = mlp_run(args.env, seed, args.steps, not args.no_progress)
                returns = evaluate_mlp(args.env, model, norm, args.eval_episodes)
                env_steps = model.num_timesteps
                trainable = sum(p.numel() for p in model.policy.parameters())
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
            row = {
                "env": args.env, "policy": policy, "seed": seed, "env_steps": env_steps,
                "trainable_params": trainable,
                "train_success_last100": round(curve[-1][1], 3),
                "eval_success": round(float(np.mean(returns > 0)), 3),
                "eval_return": round(float(returns.mean()), 3),
                "cpu_s": round(cpu, 1), "wall_s": round(time.perf_counter() - wall0, 1),
            }  # fmt: skip
            append(args.out / "runs.csv", [row])
            append(
                args.out / "curves.csv",
                [{"env": args.env, "policy": policy, "seed": seed, "env_steps": s, "success_last100": v}
                 for s, v in curve],
            )  # fmt: skip
            print(row, flush=True)


if __name__ == "__main__":
    main()
