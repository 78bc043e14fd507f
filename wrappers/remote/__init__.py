"""Mode 3: the environment in a server process, the agent in another, over real sockets.

- :mod:`~fleetgym.wrappers.remote.wire`: the framed, versioned, optionally HMAC-signed
  wire format (no pickle; arrays as raw bytes described by dtype and shape).
- :class:`RemoteEnvServer` (``fleetgym serve-env``): one env per client session.
- :class:`RemoteEnv` (``gym.make("fleetgym/Remote-v0", address=...)``): the client env,
  stepped on the wall clock at the env's control period.
- :class:`DelayedSender`: a network profile applied at the socket (hold, drop, send).
- :class:`PacketRecorder`: per-packet traces in the shim's trace format.
- :mod:`~fleetgym.wrappers.remote.playout_host`: scheduled action packets over the socket
  (``gym.make("fleetgym/Remote-v0", ..., playout=Playout())``), the shim's playout rules
  at the env host.

Details, timing rules and measured figures: ``docs/mode3.md``.
"""

from __future__ import annotations

from fleetgym.wrappers.remote.client import RemoteEnv
from fleetgym.wrappers.remote.conditions import DelayedSender, FreshestBox
from fleetgym.wrappers.remote.files import read_secret
from fleetgym.wrappers.remote.recorder import PacketRecorder
from fleetgym.wrappers.remote.server import RemoteEnvServer
from fleetgym.wrappers.remote.wire import MessageType, WireCodec

__all__ = [
    "DelayedSender",
    "FreshestBox",
    "MessageType",
    "PacketRecorder",
    "RemoteEnv",
    "RemoteEnvServer",
    "WireCodec",
    "read_secret",
]
