"""Waits that say what they wait for, and calls that cannot hang forever.

:class:`WaitLog` makes a long wait visible (a log line once it lasts a few seconds, then
every few more); :func:`call_bounded` runs work that cannot be killed (an in-process
actor) in a daemon thread and gives up on it after a timeout. Every fleet backend uses
them for its ``startup_timeout`` and ``actor_timeout``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["WAIT_LOG_AFTER_S", "WAIT_LOG_EVERY_S", "WaitLog", "call_bounded"]

logger = logging.getLogger("fleetgym.agents.fleet.base")

#: A wait longer than this many seconds is logged (what it waits for, how long so far)...
WAIT_LOG_AFTER_S = 5.0
#: ... and logged again every this many seconds while it lasts.
WAIT_LOG_EVERY_S = 15.0

_T = TypeVar("_T")


class WaitLog:
    """Makes a long wait visible: logs what is still awaited once it lasts a few seconds.

    A wait loop asks :meth:`timeout` how long it may block (its own limit, cut short at the
    next report) and calls :meth:`report` whenever it wakes up; the first line is logged
    after :data:`WAIT_LOG_AFTER_S` seconds, then every :data:`WAIT_LOG_EVERY_S`.

    Args:
        limit_name: The timeout that bounds the wait (named in the log line).
        limit: Its value in seconds (None: no limit).
        log: The logger to write to.

    Example:
        >>> wait_log = WaitLog("startup_timeout", 300.0)
        >>> wait_log.timeout(None) <= WAIT_LOG_AFTER_S
        True
        >>> wait_log.report(2, 4, "Ray actors to be placed")  # too early: logs nothing
        False
    """

    def __init__(
        self, limit_name: str, limit: float | None, log: logging.Logger | None = None
    ) -> None:
        self.limit_name = limit_name
        self.limit = limit
        self.log = log or logger
        self.started = time.perf_counter()
        self._next = self.started + WAIT_LOG_AFTER_S

    def timeout(self, timeout: float | None) -> float:
        """``timeout`` (seconds, None: unlimited) cut short at the next report."""
        until_report = max(0.0, self._next - time.perf_counter())
        return until_report if timeout is None else min(max(0.0, timeout), until_report)

    def report(self, remaining: int, total: int, what: str) -> bool:
        """Log ``waiting for <remaining> of <total> <what>`` if a report is due; True if so."""
        now = time.perf_counter()
        if remaining <= 0 or now < self._next:
            return False
        self._next = now + WAIT_LOG_EVERY_S
        limit = "no limit" if self.limit is None else f"{self.limit:g} s"
        self.log.info(
            "waiting for %d of %d %s (%.0f s so far; %s: %s)",
            remaining, total, what, now - self.started, self.limit_name, limit,
        )  # fmt: skip
        return True


def call_bounded(call: Callable[[], _T], timeout: float | None, limit_name: str, what: str) -> _T:
    """``call()`` run in a daemon thread, waited for at most ``timeout`` seconds.

    For work that runs in this process and cannot be killed (an in-process actor): on
    time-out the thread is abandoned, still running; the caller must never touch what
    it was working on again. A daemon thread does not keep the interpreter alive.

    Example:
        >>> call_bounded(lambda: 6 * 7, 5.0, "actor_timeout", "a rollout")
        42

    Raises:
        TimeoutError: If ``call`` did not return within ``timeout``.
        BaseException: Whatever ``call`` raised.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"fleetgym {what}", daemon=True).start()
    wait_log = WaitLog(limit_name, timeout)
    deadline = None if timeout is None else wait_log.started + timeout
    while not done.wait(
        wait_log.timeout(None if deadline is None else deadline - time.perf_counter())
    ):
        if deadline is not None and time.perf_counter() >= deadline:
            raise TimeoutError(f"{what} did not finish within {limit_name}={timeout} s")
        wait_log.report(1, 1, what)
    if "error" in box:
        raise box["error"]
    return box["value"]
