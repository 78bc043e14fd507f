"""Local checkpoints, devices and bfloat16: the checks :mod:`~fleetgym.agents.tokens.pretrained`,
the vision tower and the token learners share."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from fleetgym.validation import check_bool, quote


def checkpoint_dir(name: str, path: Any) -> Path:
    """``path`` as an existing local directory with a ``config.json``.

    Raises:
        TypeError: For something that is not a path.
        FileNotFoundError: Naming ``name``, if it is not such a directory.
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"{name}: expected a local directory or a config, actual {quote(path)}")
    folder = Path(path)
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{name}: expected a local checkpoint directory with a config.json (nothing is "
            f"downloaded), actual {str(path)!r}"
        )
    return folder


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(
        w for line in text.splitlines() if line.startswith("flags") for w in line.split()
    )


def resolve_device(name: str, device: Any) -> torch.device:
    """``device`` as a ``torch.device`` this process can use (``"cpu"``, ``"cuda[:N]"``).

    Raises:
        ValueError: Naming ``name``, for another kind or a CUDA device not here.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{name}: expected 'cpu' or 'cuda[:N]', actual {quote(device)}") from exc
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: expected 'cpu' or 'cuda[:N]', actual {quote(device)}")
    if resolved.type == "cuda" and (
        not torch.cuda.is_available() or (resolved.index or 0) >= torch.cuda.device_count()
    ):
        raise ValueError(
            f"{name}: expected a device torch can use here ({torch.cuda.device_count()} CUDA "
            f"devices), actual {quote(device)}"
        )
    return resolved


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` runs bfloat16 natively: a CUDA device torch says does, or a CPU
    with AVX512-BF16 or AMX-BF16 instructions."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve_bf16(bf16: Any, device: torch.device) -> bool:
    """``bf16`` (``True``, ``False`` or ``"auto"``) decided for ``device``.

    Raises:
        ValueError: For ``bf16=True`` on a device without bfloat16, or another value.
    """
    if bf16 == "auto":
        return bf16_supported(device)
    if not check_bool("bf16", bf16):
        return False
    if not bf16_supported(device):
        raise ValueError(
            f"bf16: expected a device with bfloat16 (a CUDA GPU that supports it, or a CPU "
            f"with avx512_bf16 / amx_bf16), actual {device} without it; pass bf16=False or "
            "'auto'"
        )
    return True
