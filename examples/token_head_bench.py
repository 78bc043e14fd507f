"""Slim vs full LM head of a token policy: parameters, optimiser state, peak memory, time.

The policy is fleetgym's TokenPolicy on a random Llama (``LlamaConfig``: vocabulary 32,000,
2 layers, hidden 64; ``--backbone tiny`` for the pure-torch transformer) with Hopper's
11-d observation and 3 action tokens. "full" keeps the 32,000-row head trainable and
slices its logits (RL4VLA's way); "slim" trains the 256 action rows only.

* parameters and Adam state bytes: counted after one update;
* peak memory of an update: each variant runs in its own child process and reports its
  peak resident set (``ru_maxrss``); the difference between the variants is the figure;
* time: ``act`` (KV-cached decoding of 3 tokens) and one update (teacher-forced pass,
  backward, Adam step) per batch, variants interleaved in one process, median of repeats.

Run: ``nice -n 5 python examples/token_head_bench.py --batch 64 --repeats 20``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from fleetgym.agents.tokens import (
    ActionTokenizer,
    TinyCausalTransformer,
    TokenPolicy,
    llama_backbone,
)

VOCAB, BINS, OBS = 32000, 256, 11


def build(slim: bool, backbone: str, hidden: int) -> TokenPolicy:
    torch.manual_seed(0)
    if backbone == "llama":
        net = llama_backbone(hidden_size=hidden, layers=2, heads=4, vocab_size=VOCAB)
    else:
        net = TinyCausalTransformer(hidden_size=hidden, layers=2, heads=4, vocab_size=VOCAB)
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, vocab_size=VOCAB)
    return TokenPolicy(net, tok, OBS, slim_head=slim)


def update(policy: TokenPolicy, optim: torch.optim.Optimizer, obs, tokens, adv) -> None:
    ev = policy.evaluate(obs, tokens)
    loss = -(ev.log_probs.sum((1, 2)) * adv).mean() + ev.values.square().mean()
    optim.zero_grad()
    loss.backward()
    optim.step()


def child(variant: str, backbone: str, hidden: int, batch: int) -> None:
    """One variant alone: peak RSS before and after a few updates."""
    policy = build(variant == "slim", backbone, hidden)
    params = [p for p in policy.parameters() if p.requires_grad]
    optim = torch.optim.Adam(params, lr=1e-4)
    obs, adv = torch.randn(batch, OBS), torch.randn(batch)
    tokens = policy.act(obs).tokens
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(3):
        update(policy, optim, obs, tokens, adv)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    state = sum(
        t.numel() * t.element_size()
        for s in optim.state.values()
        for t in s.values()
        if torch.is_tensor(t)
    )
    print(
        json.dumps(
            {
                "trainable": sum(p.numel() for p in params),
                "adam_bytes": state,
                "peak_kib": after,
                "peak_kib_before_update": before,
            }
        )
    )


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", choices=["llama", "tiny"], default="llama")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--child", choices=["slim", "full"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        child(args.child, args.backbone, args.hidden, args.batch)
        return
    memory = {}
    for variant in ("full", "slim"):
        cmd = [sys.executable, __file__, "--child", variant, "--backbone", args.backbone]
        cmd += ["--hidden", str(args.hidden), "--batch", str(args.batch)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        memory[variant] = json.loads(out.strip().splitlines()[-1])
    policies = {v: build(v == "slim", args.backbone, args.hidden) for v in ("full", "slim")}
    optims = {
        v: torch.optim.Adam([p for p in pol.parameters() if p.requires_grad], lr=1e-4)
        for v, pol in policies.items()
    }
    obs, adv = torch.randn(args.batch, OBS), torch.randn(args.batch)
    tokens = policies["slim"].act(obs).tokens
    times: dict[str, dict[str, list[float]]] = {v: {"act": [], "update": []} for v in policies}
    for _ in range(args.repeats):  # interleaved, so load from other jobs hits both alike
        for v, pol in policies.items():
            times[v]["act"] += timed(lambda pol=pol: pol.act(obs), 1)
            times[v]["update"] += timed(
                lambda pol=pol, v=v: update(pol, optims[v], obs, tokens, adv), 1
            )
    rows = {}
    for v in policies:
        rows[v] = dict(memory[v])
        for k in ("act", "update"):
            rows[v][f"{k}_ms"] = 1e3 * statistics.median(times[v][k])
    rows["ratio_full_over_slim"] = {
        "trainable": rows["full"]["trainable"] / rows["slim"]["trainable"],
        "adam_bytes": rows["full"]["adam_bytes"] / rows["slim"]["adam_bytes"],
        "peak_rss_delta_mib": (rows["full"]["peak_kib"] - rows["slim"]["peak_kib"]) / 1024,
        "act": rows["full"]["act_ms"] / rows["slim"]["act_ms"],
        "update": rows["full"]["update_ms"] / rows["slim"]["update_ms"],
    }
    print(json.dumps({"args": vars(args), **rows}, indent=1))


if __name__ == "__main__":
    main()
