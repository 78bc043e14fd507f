"""Slim vs full LM head at a real VLA's width: hidden 4,096, vocabulary 32,000, 1-4 layers.

Each configuration is a ``TokenPolicy.from_pretrained(LlamaConfig(...))`` (random weights,
Llama-2-7B's layer shape: hidden 4,096, 32 heads, MLP 11,008; fp32 weights) with LoRA
(rank 16 on ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``; base weights and the input
embedding frozen), 7 action tokens per decision (OpenVLA's 7-DoF arm, 256 bins) and an
11-d proprio observation; "full" keeps the 32,000-row head and trains it (RL4VLA's way),
"slim" keeps and trains its 256 action rows only. Each runs alone in a child process:

* parameters (all, trainable), Adam state and gradient bytes after the updates;
* memory: the resident set after the build, and its peak during 2 ``act`` calls and 2
  updates (the peak is reset after the build through ``/proc/self/clear_refs``, so the
  build's own transient does not count);
* time: median of the ``act`` calls (KV-cached decoding of 7 tokens) and of the updates
  (teacher-forced pass, backward, Adam step), batch 8, one torch thread, as process CPU
  time (``time.process_time``: on a shared machine the wall time also counts the other
  jobs' turns; with one thread CPU time is the compute) and as wall time.

Then a least-squares line ``memory = a + b L`` per variant, extrapolated to 32 layers.
Writes ``scale.json`` under ``--out``.

    nice -n 10 python examples/token_head_scale.py --layers 1 2 3 4 --out fleetgym-out/token_head_scale
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.tokens import LoraConfig, TokenHeadConfig, TokenPolicy

VOCAB, HIDDEN, MLP, HEADS, DIMS, OBS = 32000, 4096, 11008, 32, 7, 11


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def child(layers: int, variant: str, batch: int, repeats: int) -> dict:
    from transformers import LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=64,
        tie_word_embeddings=False,
    )  # fmt: skip
    space = gym.spaces.Box(-1.0, 1.0, (DIMS,))
    start = time.perf_counter()
    policy = TokenPolicy.from_pretrained(
        config, obs_dim=OBS, action_space=space,
        head=TokenHeadConfig(slim_head=variant == "slim"),
        lora=LoraConfig(rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj")),
    )  # fmt: skip
    if variant == "full":
        policy.head.head.weight.requires_grad_(True)  # LoRA froze it: the full head trains
    build_s = time.perf_counter() - start
    params = [p for p in policy.parameters() if p.requires_grad]
    optim = torch.optim.Adam(params, lr=1e-5)
    obs, adv = torch.randn(batch, OBS), torch.randn(batch)
    after_build = rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to now
    acts, updates, acts_wall, updates_wall = [], [], [], []
    tokens = policy.act(obs).tokens
    for _ in range(repeats):
        t0, w0 = time.process_time(), time.perf_counter()
        tokens = policy.act(obs).tokens
        acts.append(time.process_time() - t0)
        acts_wall.append(time.perf_counter() - w0)
        t0, w0 = time.process_time(), time.perf_counter()
        ev = policy.evaluate(obs, tokens)
        loss = -(ev.log_probs.sum((1, 2)) * adv).mean() + ev.values.square().mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        updates.append(time.process_time() - t0)
        updates_wall.append(time.perf_counter() - w0)
    state = sum(
        t.numel() * t.element_size() for s in optim.state.values() for t in s.values()
        if torch.is_tensor(t)
    )  # fmt: skip
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "layers": layers, "variant": variant, "batch": batch,
        "params": sum(p.numel() for p in policy.parameters()),
        "trainable": sum(p.numel() for p in params),
        "head_trainable": sum(p.numel() for p in policy.head.parameters() if p.requires_grad),
        "adam_bytes": state, "grad_bytes": grads,
        "rss_after_build_mib": after_build / 1024,
        "peak_rss_steps_mib": rss_kib("VmHWM") / 1024,
        "act_cpu_ms": 1e3 * statistics.median(acts),
        "update_cpu_ms": 1e3 * statistics.median(updates),
        "act_wall_ms": 1e3 * statistics.median(acts_wall),
        "update_wall_ms": 1e3 * statistics.median(updates_wall),
        "build_s": build_s, "cpu_s": usage.ru_utime + usage.ru_stime,
    }  # fmt: skip


def fit(rows: list[dict], key: str) -> tuple[float, float]:
    x = np.array([r["layers"] for r in rows], float)
    y = np.array([r[key] for r in rows], float)
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", type=int, default=[1, 2, 3, 4])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/token_head_scale"))
    parser.add_argument("--child", nargs=2, metavar=("LAYERS", "VARIANT"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        row = child(int(args.child[0]), args.child[1], args.batch, args.repeats)
        print(json.dumps(row))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for layers in args.layers:
        for variant in ("slim", "full"):
            cmd = [sys.executable, __file__, "--child", str(layers), variant]
            cmd += ["--batch", str(args.batch), "--repeats", str(args.repeats)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            if not args.no_progress:
                print(json.dumps(rows[-1]), flush=True)
    model = {}
    for variant in ("slim", "full"):
        mine = [r for r in rows if r["variant"] == variant]
        for key in ("peak_rss_steps_mib", "rss_after_build_mib", "act_cpu_ms", "update_cpu_ms"):
            a, b = fit(mine, key)
            model[f"{variant}.{key}"] = {"a": a, "b_per_layer": b, "at_32": a + 32 * b}
    (args.out / "scale.json").write_text(json.dumps({"rows": rows, "linear": model}, indent=1))
    print(json.dumps(model, indent=1))


if __name__ == "__main__":
    main()
