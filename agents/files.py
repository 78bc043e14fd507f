"""Files the agents write and read back: paths checked, torch files loaded safely.

Shared by the learners' checkpoints and the world model's: a checkpoint is tensors and
plain values, read with ``torch.load(weights_only=True)`` so that nothing in a file is ever
unpickled as an object.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from fleetgym.validation import quote

__all__ = ["check_folder_path", "check_path", "load_torch_file"]


def check_path(name: str, value: Any) -> Path:
    """``value`` as the path of a file to write or read.

    Raises:
        TypeError: If it is neither a ``str`` nor an ``os.PathLike``.
        ValueError: If it is empty or an existing folder.
    """
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a str or os.PathLike, actual {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name}: expected a file path, actual {quote(text)}")
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{name}: expected a file path, actual the folder {quote(str(path))}")
    return path


def check_folder_path(name: str, value: Any) -> Path:
    """``value`` as the path of a folder (it need not exist yet).

    Raises:
        TypeError: If it is neither a ``str`` nor an ``os.PathLike``.
        ValueError: If it is empty or blank.
    """
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a str or os.PathLike, actual {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name}: expected a folder path, actual {quote(text)}")
    return Path(text)


def load_torch_file(path: Path, what: str) -> dict[str, Any]:
    """The dict of tensors and plain values ``torch.save`` wrote to ``path``.

    Loaded with ``torch.load(weights_only=True)``: a file holding anything else (pickled
    objects, random bytes, a truncated archive) is refused, and the refusal never
    suggests loading it as a pickle.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If it is not such a file, or not a dict.
    """
    import torch

    if not path.is_file():
        raise FileNotFoundError(f"expected {what}, actual missing {path}")
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": not our file
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError ...
        # Not chained: torch's message advises weights_only=False, which runs arbitrary code.
        raise ValueError(
            f"{path}: expected {what} (torch.save of tensors and plain values), actual a file "
            f"that is not a fleetgym checkpoint ({type(exc).__name__}); it was not loaded"
        ) from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: expected {what}, actual a {type(state).__name__}")
    return state
