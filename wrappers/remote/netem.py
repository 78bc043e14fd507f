"""The Linux ``tc qdisc ... netem`` command equivalent to a channel, and whether netem exists.

netem draws each packet's delay from a normal law (clipped at 0) with i.i.d. loss, like
:class:`~fleetgym.wrappers.channels.GaussianChannel` without correlation; its own
``delay ... CORR%`` correlation is a different (variance-shrinking) model, so a
correlated channel is printed without it and flagged. Gilbert-Elliott loss maps to
``loss gemodel p r 1-h 1-k``. A trace has no netem equivalent.

Example:
    >>> from fleetgym.wrappers.channels import GaussianChannel
    >>> netem_command(GaussianChannel(30, 10, 0.02), "veth0")
    'tc qdisc replace dev veth0 root netem limit 100000 delay 30ms 10ms distribution normal loss 2%'
"""

from __future__ import annotations

import shutil
import subprocess

from fleetgym.wrappers.channel_base import Channel
from fleetgym.wrappers.channels import GaussianChannel, GilbertElliottChannel

__all__ = ["netem_available", "netem_command"]


def _pct(p: float) -> str:
    return f"{p * 100:.6g}%"


def netem_command(channel: Channel, dev: str = "eth0") -> str:
    """The ``tc`` command applying ``channel`` to the packets leaving ``dev``.

    Raises:
        ValueError: For a channel netem cannot express (a trace).
    """
    if isinstance(channel, (GaussianChannel, GilbertElliottChannel)):
        parts = [f"tc qdisc replace dev {dev} root netem limit 100000"]
        if channel.mean_ms > 0 or channel.std_ms > 0:
            parts.append(f"delay {channel.mean_ms:g}ms")
            if channel.std_ms > 0:
                parts.append(f"{channel.std_ms:g}ms distribution normal")
        if isinstance(channel, GilbertElliottChannel):
            ch = channel
            parts.append(
                f"loss gemodel {_pct(ch.p_good_to_bad)} {_pct(ch.p_bad_to_good)} "
                f"{_pct(1 - ch.loss_bad)} {_pct(ch.loss_good)}"
            )
        elif channel.loss > 0:
            parts.append(f"loss {_pct(channel.loss)}")
        command = " ".join(parts)
        if channel.correlation > 0:
            command += "  # correlation not mapped (netem's differs)"
        return command
    raise ValueError(f"channel: expected a Gaussian or Gilbert-Elliott channel, actual {channel!r}")


def netem_available() -> tuple[bool, str]:
    """(True, "") if ``tc`` can create a netem qdisc here, else (False, the reason)."""
    tc = shutil.which("tc")
    if tc is None:
        return False, "no tc binary (iproute2) on this machine"
    try:
        out = subprocess.run(
            [tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"tc failed: {exc}"
    if out.returncode != 0:
        return False, f"tc qdisc add ... netem: {out.stderr.strip() or out.returncode}"
    subprocess.run(
        [tc, "qdisc", "del", "dev", "lo", "root"], capture_output=True, timeout=10, check=False
    )
    return True, ""
