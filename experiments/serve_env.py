"""``fleetgym serve-env``: serve a Gymnasium env to remote agents (Mode 3).

Runs a :class:`~fleetgym.wrappers.remote.RemoteEnvServer` until interrupted: one env per
client session, control on TCP, observations and actions as UDP datagrams on the same
port, the profile's uplink channel applied to observations at the socket. Agents connect
with ``gym.make("fleetgym/Remote-v0", address="HOST:PORT")``.

Clients that send scheduled action packets (``playout=Playout(...)``) are served by the
playout rules they ask for at HELLO; ``--fallback MODULE:NAME`` gives the server the
callable ``obs -> action`` that acts in a gap for those that ask for
``underrun="fallback"`` (a policy cannot cross the wire; without it they are refused).

With ``--measure N`` it instead runs a Mode 3 client against itself for N control ticks
and prints the parity report (socket vs shim delay and loss per direction, throughput
against the control-rate ceiling, timer lateness, loopback round trips).

Examples::

    fleetgym serve-env --env-id CartPole-v1 --bind 127.0.0.1:7000 --profile wifi-normal
    fleetgym serve-env --env-id CartPole-v1 --profile wifi-degraded --measure 3000 --json
    fleetgym serve-env --env-id Pendulum-v1 --fallback my_policies:pendulum_fallback
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import tempfile
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_file,
    env_kwarg,
    host_port,
    non_negative_int,
    output_path,
    positive_int,
    remote_step_ms,
)

__all__ = ["configure", "load_fallback", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument("--env-id", required=True, help="the Gymnasium ID each session makes")
    parser.add_argument(
        "--env-kwarg",
        type=env_kwarg,
        action="append",
        default=[],
        metavar="K=V",
        help="keyword for gym.make (value parsed as JSON when it can be); repeatable",
    )
    parser.add_argument(
        "--bind",
        type=host_port,
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to listen on, TCP and UDP (default 127.0.0.1:0, a free port)",
    )
    parser.add_argument(
        "--profile",
        default="perfect",
        help="network profile applied at the socket (default perfect)",
    )
    parser.add_argument(
        "--secret-file",
        default=None,
        help="file with the shared secret (>= 16 bytes); required for a non-loopback --bind",
    )
    parser.add_argument(
        "--step-ms",
        type=remote_step_ms,
        default=None,
        help="control period in ms, up to 60000 (default: the env's)",
    )
    parser.add_argument(
        "--max-sessions", type=positive_int, default=64, help="most clients at once (default 64)"
    )
    parser.add_argument(
        "--record-dir",
        type=output_path,
        default=None,
        help="write each session's action trace here (created if missing)",
    )
    parser.add_argument(
        "--port-file",
        type=output_path,
        default=None,
        help="write the port listened on to this file once bound",
    )
    parser.add_argument(
        "--fallback",
        default=None,
        metavar="MODULE:NAME",
        help="the env host's fallback policy, a callable obs -> action imported from MODULE, "
        "for clients whose playout asks for underrun 'fallback' (default: none; they are "
        "refused)",
    )
    parser.add_argument(
        "--measure",
        type=positive_int,
        default=None,
        metavar="N",
        help="run a client against this server for N ticks and print the parity report",
    )
    parser.add_argument(
        "--transport", choices=("udp", "tcp"), default="udp", help="client transport for --measure"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of --measure (default 0)"
    )
    parser.add_argument("--json", action="store_true", help="print the --measure report as JSON")


def load_fallback(spec: str | None) -> Any:
    """The callable ``MODULE:NAME`` names (``NAME`` may be dotted), or None.

    Raises:
        UsageError: For a spec that is not ``MODULE:NAME``, that does not import, or that
            names something that is not callable.
    """
    if spec is None:
        return None
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name.strip() or not name.strip():
        raise UsageError(
            f"--fallback: expected MODULE:NAME (a callable obs -> action), actual {spec!r}"
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(
            f"--fallback: expected an importable MODULE:NAME, actual {spec!r} ({exc})"
        ) from None
    if not callable(obj):
        raise UsageError(
            f"--fallback: expected a callable obs -> action, actual {spec!r} ({type(obj).__name__})"
        )
    return obj


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return x


def _print_report(rep: dict[str, Any]) -> None:
    print(f"Mode 3 parity, profile {rep['profile']}, {rep['steps']} ticks of {rep['step_ms']:g} ms")
    print(f"{'direction':<9} {'':<7} {'loss':>6} {'p10':>7} {'p50':>7} {'p90':>7} {'p99':>7}  (ms)")
    for direction in ("uplink", "downlink"):
        d = rep[direction]
        for src in ("socket", "shim"):
            s = d[src]
            print(
                f"{direction if src == 'socket' else '':<9} {src:<7} {s['loss']:>6.1%} "
                f"{s['p10_ms']:>7.1f} {s['p50_ms']:>7.1f} {s['p90_ms']:>7.1f} {s['p99_ms']:>7.1f}"
            )
        print(f"{'':<9} {'ok':<7} " + " ".join(f"{k}={v}" for k, v in d["within"].items()))
    print(
        f"steps/hour {rep['steps_per_hour']:,.0f} = {rep['throughput_ratio']:.2f} x the ceiling "
        f"{rep['ceiling_steps_per_hour']:,.0f}; overruns {rep['overruns']}"
    )
    late, over = rep["env_tick_late_ms"], rep["action_hold_overshoot_ms"]
    print(
        f"timer: env tick late p50 {late['p50']:.2f} / p99 {late['p99']:.2f} ms; "
        f"action hold overshoot p50 {over['p50']:.2f} / p99 {over['p99']:.2f} ms"
    )
    for ch, q in rep["round_trip_ms"].items():
        print(f"loopback round trip ({ch}): p50 {q['p50']:.3f} ms, p99 {q['p99']:.3f} ms")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (or measure); returns 0.

    Raises:
        UsageError: A bad argument, found before the server binds: an env the server
            cannot serve, an unwritable ``--port-file`` or ``--record-dir``, a bad secret
            file, a ``--fallback`` that does not import as a callable, ``--measure`` with
            ``--secret-file``, or an address that cannot be bound.
    """
    from fleetgym.errors import FleetgymError
    from fleetgym.wrappers.remote import RemoteEnvServer
    from fleetgym.wrappers.remote.parity import measure_socket_parity

    if args.measure and args.secret_file:
        raise UsageError("--measure: expected no --secret-file (it measures on loopback)")
    if args.port_file is not None:
        check_output_file("--port-file", args.port_file)
    fallback = load_fallback(args.fallback)
    tmp = tempfile.TemporaryDirectory() if args.measure and args.record_dir is None else None
    try:
        server = RemoteEnvServer(
            args.env_id,
            env_kwargs=dict(args.env_kwarg),
            bind=args.bind,
            profile=args.profile,
            secret_file=args.secret_file,
            step_ms=args.step_ms,
            max_sessions=args.max_sessions,
            record_dir=args.record_dir if tmp is None else tmp.name,
            fallback=fallback,
        )
        server.start()
    except (FleetgymError, TypeError, ValueError, OSError) as exc:
        if tmp is not None:
            tmp.cleanup()
        raise UsageError(str(exc)) from None
    try:
        host, port = server.address
        if args.port_file:
            with open(args.port_file, "w", encoding="utf-8") as handle:
                handle.write(f"{port}\n")
        if args.measure:
            # One call, no bar: say how long the wait is.
            period = server.step_ms if getattr(server, "step_ms", None) else None
            about = f", about {args.measure * period / 1000:.0f} s" if period else ""
            print(
                f"measuring {args.measure} control ticks on {host}:{port}{about} ...",
                file=sys.stderr,
                flush=True,
            )
            rep = measure_socket_parity(
                server, args.measure, seed=args.seed, transport=args.transport
            )
            if args.json:
                print(json.dumps(_finite(rep), indent=2))
            else:
                _print_report(rep)
            return 0
        print(
            f"serving {args.env_id} on {host}:{port} (profile {server.profile.name}); Ctrl-C stops"
        )
        sys.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopping", file=sys.stderr)
        return 0
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()
