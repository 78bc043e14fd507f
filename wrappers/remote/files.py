"""Local files of Mode 3: the shared secret's file, and the path a trace is written to.

Example:
    >>> read_secret(5)
    Traceback (most recent call last):
    ...
    TypeError: secret_file: expected a path (str or os.PathLike; an int is not read as a file descriptor), actual int 5
"""

from __future__ import annotations

import os
from typing import Any

from fleetgym.validation import quote

__all__ = ["MAX_SECRET_FILE_BYTES", "check_record_path", "read_secret"]


#: Largest secret file :func:`read_secret` reads (a key, not a document).
MAX_SECRET_FILE_BYTES = 4096


def read_secret(path: str | os.PathLike[str]) -> bytes:
    """The shared secret stored in a file (surrounding whitespace stripped).

    At most :data:`MAX_SECRET_FILE_BYTES` are read: a secret is a short key, and a path
    such as ``/dev/zero`` must not exhaust memory.

    Args:
        path: The secret's file: at most 4096 bytes, holding at least 16 bytes once
            surrounding whitespace is stripped. An int is refused, not read as a descriptor.

    Raises:
        TypeError: If ``path`` is not a path.
        ValueError: If the file is unreadable, larger than the bound or holds fewer than
            16 bytes.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            "secret_file: expected a path (str or os.PathLike; an int is not read as a file "
            f"descriptor), actual {type(path).__name__} {quote(path)}"
        )
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"secret_file: expected a readable file, actual {exc}") from exc
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise ValueError(
            f"secret_file: expected a file of at most {MAX_SECRET_FILE_BYTES} bytes, "
            f"actual more ({os.fspath(path)})"
        )
    secret = raw.strip()
    if len(secret) < 16:
        raise ValueError(f"secret_file: expected at least 16 bytes, actual {len(secret)}")
    return secret


def check_record_path(path: Any) -> None:
    """``record_path``: a file whose folder exists and can be written."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"record_path: expected a file path or None, actual {quote(path)}")
    folder = os.path.dirname(os.path.abspath(path)) if str(os.fspath(path)).strip() else ""
    writable = folder and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)
    if not writable or os.path.isdir(path):
        raise ValueError(f"record_path: expected a writable file path, actual {quote(path)}")
