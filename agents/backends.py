"""Where work runs: the one backend vocabulary of fleetgym's agents.

The fleet (:func:`~fleetgym.agents.fleet.make_fleet`), the asynchronous trainer
(:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`, ``TokenAsyncPPO``), the
data-parallel learner (:class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO`)
and the inference server the fleets run (``inference="server"``) all name where their
workers run with one ``backend=`` argument, out of one vocabulary:

* ``"inprocess"``: in this process (the fleet's actors one after the other, the
  asynchronous trainer's actor slots in threads);
* ``"process"``: worker processes on this machine;
* ``"ray"``: Ray actors, on one machine or many (``pip install fleetgym[ray]``).

Each component takes the subset it supports (the data-parallel learner has no
``"inprocess"`` ranks) and says so when refused. Whether a policy runs in each actor or in
a shared inference server is a separate axis, ``inference=`` (:data:`INFERENCE_MODES`).
Fleets can add names of their own (:func:`fleetgym.agents.fleet.register_backend`).

The names of 1.x (``"thread"``, ``"processes"``) are refused with an error naming the 2.0
name (:data:`RENAMED_BACKENDS`).

Example:
    >>> from fleetgym.agents.backends import check_backend
    >>> check_backend("process")
    'process'
    >>> check_backend("processes")
    Traceback (most recent call last):
    ...
    ValueError: backend: expected one of ('inprocess', 'process', 'ray'), actual 'processes' (renamed 'process' in 2.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetgym.validation import check_choice, quote

#: The backend names: in this process, worker processes on this machine, Ray actors.
BACKENDS: tuple[str, ...] = ("inprocess", "process", "ray")
#: Where the policy runs: each actor's own copy, or a shared inference server.
INFERENCE_MODES: tuple[str, ...] = ("local", "server")
#: Backend names of fleetgym 1.x and their 2.0 names (refused, the new name given).
RENAMED_BACKENDS: dict[str, str] = {
    "thread": "inprocess",
    "threads": "inprocess",
    "processes": "process",
}


def renamed_hint(value: Any) -> str:
    """The hint an error message appends for a 1.x backend name (``""`` for any other).

    Example:
        >>> renamed_hint("thread")
        " (renamed 'inprocess' in 2.0)"
    """
    if isinstance(value, str) and value in RENAMED_BACKENDS:
        return f" (renamed {RENAMED_BACKENDS[value]!r} in 2.0)"
    return ""


def check_backend(value: Any, choices: Iterable[str] = BACKENDS, name: str = "backend") -> str:
    """``value`` as one of the backend names in ``choices``.

    Args:
        value: The backend name given.
        choices: The names the caller supports (default all of :data:`BACKENDS`).
        name: The argument's name in the error message.

    Returns:
        ``value``.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it is not one of ``choices``; for a 1.x name the message names its
            2.0 name.
    """
    options = tuple(choices)
    if isinstance(value, str) and value not in options:
        raise ValueError(
            f"{name}: expected one of {options}, actual {quote(value)}{renamed_hint(value)}"
        )
    return check_choice(name, value, options)


__all__ = ["BACKENDS", "INFERENCE_MODES", "RENAMED_BACKENDS", "check_backend", "renamed_hint"]
