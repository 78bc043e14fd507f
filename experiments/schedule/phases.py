"""Piecewise-constant fleet schedules: :class:`PhaseSchedule` and its predictor.

A schedule such as ``16x9>8x5>16`` (16 actors for 9 rounds, 8 for 5, then 16) is what
``fleetgym schedule search`` samples and what ``fleetgym schedule evaluate --scheduler
phase:16x9>8x5>16`` plays next to the baselines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetgym.validation import check_int

__all__ = ["PhaseSchedule", "PhaseScheduler"]


@dataclass(frozen=True)
class PhaseSchedule:
    """A piecewise-constant fleet: ``sizes[j]`` actors from round ``switches[j-1]`` on.

    ``switches`` are the 1-based rounds where phases 2, 3, ... start (strictly
    increasing, one fewer than ``sizes``); the last phase lasts to the end of the run.

    Raises:
        ValueError: sizes < 1, or switches that are not increasing rounds >= 2.
    """

    sizes: tuple[int, ...]
    switches: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        sizes = tuple(check_int("sizes", n, low=1) for n in self.sizes)
        switches = tuple(check_int("switches", k, low=2) for k in self.switches)
        if not sizes or len(switches) != len(sizes) - 1:
            raise ValueError(
                f"switches: expected len(sizes) - 1 = {len(sizes) - 1} rounds, "
                f"actual {len(switches)}"
            )
        if any(b <= a for a, b in zip(switches, switches[1:], strict=False)):
            raise ValueError(f"switches: expected increasing rounds, actual {switches}")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "switches", switches)

    def actors_at(self, k: int) -> int:
        """Actors of round ``k`` (1-based)."""
        return self.sizes[sum(k >= s for s in self.switches)]

    def canonical(self) -> PhaseSchedule:
        """The same schedule with adjacent phases of equal size merged."""
        sizes, switches = [self.sizes[0]], []
        for size, start in zip(self.sizes[1:], self.switches, strict=True):
            if size != sizes[-1]:
                sizes.append(size)
                switches.append(start)
        return PhaseSchedule(tuple(sizes), tuple(switches))

    @classmethod
    def parse(cls, label: str) -> PhaseSchedule:
        """The schedule of a :attr:`label` such as ``16x9>8x5>16`` (or ``fixed:16``).

        Example:
            >>> PhaseSchedule.parse("16x9>8x5>16")
            PhaseSchedule(sizes=(16, 8, 16), switches=(10, 15))
            >>> PhaseSchedule.parse("16x9>8x5>16").label
            '16x9>8x5>16'

        Raises:
            ValueError: a label that is not ``NxK>...>N`` with whole numbers >= 1.
        """
        if not isinstance(label, str):
            raise TypeError(f"schedule: expected a str, actual {type(label).__name__}")
        text = label.strip()
        if text.startswith("fixed:"):
            text = text[len("fixed:") :]
        parts = text.split(">")
        try:
            phases = [tuple(int(x) for x in part.split("x")) for part in parts]
        except ValueError:
            phases = []
        shapes_ok = phases and all(len(p) == 2 for p in phases[:-1]) and len(phases[-1]) == 1
        if not shapes_ok or any(x < 1 for p in phases for x in p):
            raise ValueError(
                f"schedule: expected phases like 16x9>8x5>16 (N actors x K rounds, ..., then "
                f"N), actual {label!r}"
            )
        switches, start = [], 1
        for _, rounds in phases[:-1]:
            start += rounds
            switches.append(start)
        return cls(tuple(p[0] for p in phases), tuple(switches))

    @property
    def label(self) -> str:
        """``32x4>16``: 32 actors for 4 rounds, then 16 (``fixed:16`` for one phase)."""
        if len(self.sizes) == 1:
            return f"fixed:{self.sizes[0]}"
        starts = (1, *self.switches)
        parts = [f"{n}x{b - a}" for n, a, b in zip(self.sizes, starts, self.switches, strict=False)]
        return ">".join([*parts, str(self.sizes[-1])])


class PhaseScheduler:
    """SB3-style ``predict`` for a :class:`PhaseSchedule` (the state counts rounds).

    Example:
        >>> sched = PhaseScheduler(PhaseSchedule((4, 2), (2,)))
        >>> a, state = sched.predict(np.zeros(7))
        >>> b, state = sched.predict(np.zeros(7), state)
        >>> int(a) + 1, int(b) + 1
        (4, 2)
    """

    env_overrides: dict[str, Any] = {}

    def __init__(self, schedule: PhaseSchedule) -> None:
        self.schedule = schedule
        self.name = schedule.label

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The action ``actors - 1`` of the next round; ``state`` is the rounds done."""
        done = 0 if state is None else int(np.asarray(state).reshape(-1)[0])
        if episode_start is not None and bool(np.any(episode_start)):
            done = 0
        action = np.asarray(self.schedule.actors_at(done + 1) - 1, dtype=np.int64)
        return action, np.array([[done + 1]])
