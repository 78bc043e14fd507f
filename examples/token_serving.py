"""Inference-server throughput of a token policy against the batch size (1 to 256).

The policy is the tiny VLA of ``examples/token_babyai_vla.py``: a random Llama (hidden 64,
2 layers, vocabulary 32,000) and a SigLIP-style tower (hidden 32, 1 layer) written with
``save_pretrained`` and loaded with ``TokenPolicy.from_pretrained`` (LoRA rank 8), reading
BabyAI's 7x7x3 grid as 4 image tokens, the direction and 8 instruction ids, and decoding
one action token of 7 bins; ``--tokens 7`` decodes a 7-dimensional Box action instead
(7 tokens per request, KV-cached). It is served by
:class:`~fleetgym.agents.inference.InferenceServer` (``TokenPolicyModel``) with
``max_batch`` = the batch size; one client submits that many requests at a time, so
every forward pass is one full batch (checked through the server's ``mean_batch``).
Reported: requests/s over wall time, CPU ms per request (the process's CPU time:
the server thread's forward passes plus the client), the forward time per batch.

    nice -n 10 python examples/token_serving.py --batches 1 2 4 8 16 32 64 128 256 \
        --out fleetgym-out/token_serving
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from fleetgym.agents.inference import InferenceServer, TokenPolicyModel
from fleetgym.agents.tokens import (
    InstructionTokenizer,
    LoraConfig,
    TokenHeadConfig,
    TokenPolicy,
    VisionConfig,
)

OBS = 148


def build(tokens: int, device: str) -> TokenPolicy:
    from transformers import LlamaConfig, LlamaForCausalLM, SiglipVisionConfig, SiglipVisionModel

    folder = Path(tempfile.mkdtemp(prefix="tiny_vla_"))
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32000,
            hidden_size=64,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=64,
        )  # fmt: skip
    ).save_pretrained(folder)
    SiglipVisionModel(
        SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=8,
            patch_size=4,
            vision_use_head=False,
        )  # fmt: skip
    ).save_pretrained(folder / "vision")
    space = gym.spaces.Discrete(7) if tokens == 1 else gym.spaces.Box(-1.0, 1.0, (tokens,))
    return TokenPolicy.from_pretrained(
        folder, obs_dim=OBS, action_space=space,
        head=TokenHeadConfig(instruction_length=8, max_steps=64),
        vision=VisionConfig(image_shape=(7, 7, 3)), lora=LoraConfig(rank=8), device=device,
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    p.add_argument("--tokens", type=int, default=1, help="action tokens per request")
    p.add_argument("--requests", type=int, default=1024, help="at least this many per size")
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/token_serving"))
    p.add_argument("--device", default="cpu", help="where the server decodes (cuda[:N])")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    policy = build(args.tokens, args.device)
    rng = np.random.default_rng(0)
    ids = InstructionTokenizer().encode("go to the red ball")
    rows = []
    for b in tqdm(args.batches, disable=args.no_progress):
        # the request row: [raw observation, step, instruction ids] (float32)
        parts = [rng.normal(size=(b, OBS)), np.zeros((b, 1)), np.repeat(ids[None], b, 0)]
        obs = np.concatenate(parts, axis=1).astype(np.float32)
        model = TokenPolicyModel(policy, device=args.device)
        rounds = max(3, -(-args.requests // b))
        with InferenceServer(model, max_batch=b, max_wait_ms=50.0) as server:
            client = server.connect(slots=max(b, 1))
            client.infer(obs, noise=rng.random((b, args.tokens)))  # warm-up
            server.reset_metrics()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(rounds):
                client.infer(obs, noise=rng.random((b, args.tokens)))
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            metrics = server.metrics()
            client.close()
        n = rounds * b
        rows.append({
            "batch": b, "requests": n, "requests_per_s": n / wall,
            "cpu_ms_per_request": 1e3 * cpu / n, "mean_batch": metrics.get("mean_batch"),
            "forward_ms_per_batch": metrics.get("forward_ms_mean"),
            "utilisation": metrics.get("utilisation"), "wall_s": wall, "cpu_s": cpu,
        })  # fmt: skip
        if args.no_progress:
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "serving.json").write_text(
        json.dumps({"tokens": args.tokens, "rows": rows}, indent=1)
    )
    for r in rows:
        print(
            f"{r['batch']:4d}  {r['requests_per_s']:9.1f} req/s  {r['cpu_ms_per_request']:7.3f} "
            f"CPU ms/req  mean batch {r['mean_batch']}  forward {r['forward_ms_per_batch']} ms"
        )


if __name__ == "__main__":
    main()
