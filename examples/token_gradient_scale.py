"""The policy-gradient norm of each ratio level on one on-policy batch, per reduction.

Collects one rollout of the default :class:`fleetgym.agents.learners.TokenPPO` (seed 0,
8 envs x 64 decisions, ``chunk=2``), takes its GAE advantages (normalised) and, for
``scale="term"`` (the mean of every term) and ``scale="decision"`` (a decision's terms
summed), backpropagates :func:`fleetgym.agents.learners.level_policy_loss` at each level
with the behaviour log-probs as the old ones (every ratio 1) and prints the gradient norms.

    nice -n 10 python examples/token_gradient_scale.py --env Hopper-v5
"""

from __future__ import annotations

import argparse

import torch

from fleetgym.agents.learners import TokenPPO, level_policy_loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = TokenPPO(args.env, seed=args.seed, chunk=args.chunk)
    rollout = model.collector.collect(model.policy, model.config.n_steps)
    flat = model.flatten(rollout)
    adv_np, _ = model._targets(rollout, flat)
    adv = torch.from_numpy(adv_np.reshape(-1))
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for scale in ("term", "decision"):
        norms = {}
        for level in ("token", "action", "chunk"):
            model.policy.zero_grad()
            ev = model.policy.evaluate(flat["obs"], flat["tokens"], step=flat["steps"])
            loss, _ = level_policy_loss(
                ev.log_probs, flat["old"], adv, level, mask=flat.get("mask"), scale=scale
            )
            loss.backward()
            grads = [q.grad.flatten() for q in model.policy.parameters() if q.grad is not None]
            norms[level] = float(torch.cat(grads).norm())
        print(
            f"scale={scale}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in norms.items())
            + f"; chunk/token {norms['chunk'] / norms['token']:.2f}, "
            f"chunk/action {norms['chunk'] / norms['action']:.2f}"
        )
    model.collector.close()


if __name__ == "__main__":
    main()
