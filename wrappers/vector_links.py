"""Both directions of every sub-env of
:class:`~fleetgym.wrappers.vector.NetworkShimVectorWrapper`: arrival calendars and payload
rings, a fixed list of whole-array numpy operations per tick.

The control-loop model is the one of :mod:`fleetgym.wrappers.links` (a packet sent at tick
``i`` with delay ``d`` is usable from tick ``floor(i + d / P + offset)``); this module is the
vectorised form of :class:`~fleetgym.wrappers.links.PacketLink`, checked against it in the
tests.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fleetgym.wrappers.channel_base import DelaySampler

__all__ = ["VectorLinks"]


#: Delay (in ticks) standing for a lost packet: far below any arrival tick.
_LOST = -(1 << 40)


class VectorLinks:
    """Both directions for all sub-envs: delay blocks, arrival calendar, payload rings.

    Row ``i`` of every per-row array is sub-env i's downlink (actions), row ``n + i`` its
    uplink (observations), so one whole-array operation serves both directions. Every
    row sends one packet per call of :meth:`tick` (sub-envs that were being reset are
    fixed up by the caller with :meth:`unsend` and :meth:`clear`): the hot path is a
    fixed list of numpy operations, with no per-env Python.

    Time is a global tick ``g`` shared by all sub-envs (one per vector step), not each
    episode's own tick: the action sent at a sub-env's episode tick t and the
    observation sent at its tick t + 1 (they are sent in the same vector step) both
    carry ``g``. So the packets sent now go to one ring column and this tick's arrivals
    are one calendar column (views, not fancy indexing); episode ages are differences of
    global ticks. Delays are whole ticks (``floor(i + d / P + offset) == i + floor(d / P +
    offset)``, and floor commutes with the FIFO maximum; ``offsets`` are the downlink's and
    the uplink's, as for :class:`~fleetgym.wrappers.links.PacketLink`); a lost packet, or one ``horizon`` ticks late
    or more, has delay ``_LOST`` and goes to the trash slot of the calendar.
    """

    def __init__(
        self,
        n: int,
        horizon: int,
        block: int,
        step_ms: float,
        fifo: bool,
        act: tuple[tuple[int, ...], np.dtype[Any]],
        obs: tuple[tuple[int, ...], np.dtype[Any]],
        offsets: tuple[float, float] = (0.0, 0.0),
        count: bool = True,
    ) -> None:
        m = 2 * n
        # Keep the episode counters (reordered, stale, lost, holds)? Only the full info
        # level reports them; nothing else depends on them, so without it they stay 0.
        self.count = count
        self.n, self.h, self.block, self.step_ms, self.fifo = n, horizon, block, step_ms, fifo
        # Periods added to every delay: rows [0, n) are actions, [n, 2n) observations.
        self.offsets = np.repeat(np.asarray(offsets, dtype=np.float64), n)
        # Ring and calendar sizes: a power of two >= horizon, so "mod" is a bit mask.
        size = 1 << max(int(horizon) - 1, 1).bit_length()
        self.mask = size - 1
        self.samplers: list[DelaySampler | None] = [None] * m
        rows = np.arange(m)
        # Row j's pre-drawn delays (whole ticks) are kbuf[j * 2 * block + pos : ... + fill]:
        # room for two blocks, so that a row with less than a block left is topped up
        # (its rest moved to the front, a new block drawn behind it) together with the
        # others, in one refill every ~block ticks, instead of one refill each time some
        # row runs out. Every row still draws its stream block by block, in order.
        cap = 2 * block
        self.kbuf = np.zeros(m * cap, dtype=np.int64)
        self.rowoff = rows * cap
        self.flatpos = self.rowoff.copy()
        self.fill = np.zeros(m, dtype=np.int64)  # delays drawn into each row's buffer
        self._span = np.arange(block)
        # Calendar by arrival tick (slot `size` is the trash slot of lost packets): the
        # newest global send tick arriving then, and how many packets arrive.
        self.cal_max = np.full((m, size + 1), -1, dtype=np.int64)
        self.cal_cnt = np.zeros((m, size + 1), dtype=np.int64)
        self.cal_off = rows * (size + 1)
        self.cal_max_flat = self.cal_max.reshape(-1)
        self.cal_cnt_flat = self.cal_cnt.reshape(-1)
        self.trash = size
        # Only "latest" can reorder; counting that needs per-send arrival ticks.
        self.scan = count and not fifo
        self.arr = np.full((size, m), -1, dtype=np.int64)
        self.sent_idx = np.zeros(size, dtype=np.int64)
        # Payloads by arrival tick, beside the calendar (same flat slot index): the newest
        # packet of a slot is written last, so the slot holds the payload that matters.
        # Actions use rows [0, n), observations rows [n, 2n) (the first n rows unused).
        self.cal_act = np.zeros((n, size + 1, *act[0]), dtype=act[1])
        self.cal_obs = np.zeros((m, size + 1, *obs[0]), dtype=obs[1])
        self.cal_act_flat = self.cal_act.reshape(n * (size + 1), *act[0])
        self.cal_obs_flat = self.cal_obs.reshape(m * (size + 1), *obs[0])
        # Each observation as one opaque element (its bytes), so that storing and picking
        # whole observations is a 1-D copy: numpy's fancy indexing and masked copies of
        # whole rows cost several times more than of single elements.
        self.obs_dtype = np.dtype(obs[1])
        self.obs_shape = (n, *obs[0])
        nbytes = self.obs_dtype.itemsize * math.prod(obs[0])
        self.obs_item = np.dtype((np.void, nbytes)) if nbytes else None
        self.cal_obs_items = self.cal_obs.reshape(m, size + 1, -1)
        if self.obs_item is not None:
            self.cal_obs_items = self.cal_obs_items.view(self.obs_item)[..., 0]
        self.cal_obs_items_flat = self.cal_obs_items.reshape(-1)
        assert np.shares_memory(self.cal_obs_items_flat, self.cal_obs)  # views, not copies
        # Per-row state in one array, so that starting episodes resets it in one call:
        # fifo arrival of the last packet, global send tick of the freshest packet, and
        # the episode counters reordered, stale, lost and action holds (downlink rows).
        self.state = np.zeros((6, m), dtype=np.int64)
        self._fresh = np.array([-1, -1, 0, 0, 0, 0], dtype=np.int64)[:, None]
        self.last, self.best = self.state[0], self.state[1]
        self.last.fill(-1)
        self.best.fill(-1)
        self.best_down, self.best_up = self.best[:n], self.best[n:]
        self.counts = self.state[2:]
        self.reordered, self.stale, self.lost, holds = self.counts
        self.holds = holds[:n]
        self.left = 0  # draws left before some row's block runs out
        self._fi = np.empty(m, dtype=np.int64)  # scratch, reused within one step
        # Constants and the current tick as 0-d arrays: numpy's ufuncs take them at about
        # half the cost of a Python int operand.
        self.now = np.zeros((), dtype=np.int64)  # the global tick of the last tick()
        self._zero, self._one = np.array(0, dtype=np.int64), np.array(1, dtype=np.int64)
        self._mask = np.array(self.mask, dtype=np.int64)
        self._trash = np.array(self.trash, dtype=np.int64)
        self._r = 0  # calendar column of the current tick

    def start(self, mask: np.ndarray, best: int) -> None:
        """Rows in ``mask`` (bool, 2n) start an episode: nothing in flight, counters 0,
        freshest packet at global tick ``best``.

        Stale entries of ``cal_max`` are left: they are not newer than ``best``, so they
        can never count as fresher.
        """
        if self.count:
            self.cal_cnt[mask] = 0
        if self.scan:
            self.arr[:, mask] = -1
        fresh = self._fresh
        fresh[1, 0] = best
        np.copyto(self.state, fresh, where=mask)

    def set_sampler(self, row: int, sampler: DelaySampler) -> None:
        self.samplers[row] = sampler
        self.flatpos[row] = self.rowoff[row]
        self.fill[row] = 0
        self.left = 0

    def unsend(self, mask: np.ndarray) -> None:
        """Give back the delays the rows in ``mask`` just drew (their sub-env was resetting)."""
        self.flatpos -= mask  # only lowers positions: `left` stays a lower bound

    def _refill(self) -> None:
        """Top up every row with less than a block left: move its rest to the front of
        its buffer and draw the next block of its stream behind it."""
        block = self.block
        kb = self.kbuf.reshape(self.fill.size, 2 * block)
        pos = self.flatpos - self.rowoff
        rest = self.fill - pos
        rows = np.flatnonzero(rest < block)
        span = self._span
        if rows.size:
            # One stream per row (each its own generator), then the conversion to whole
            # ticks for all refilled rows at once.
            raw = np.empty((rows.size, block))
            for i, j in enumerate(rows.tolist()):
                sampler = self.samplers[j]
                assert sampler is not None
                raw[i] = sampler.next(block)
            rel = np.divide(raw, self.step_ms, out=raw)
            rel += self.offsets[rows, None]  # a lost packet stays at inf
            # Lost (inf) and beyond-horizon packets never arrive.
            far = rel >= self.h
            rel[far] = 0.0
            k = np.floor(rel, out=rel).astype(np.int64)
            k[far] = _LOST
            r2 = rows[:, None]
            kept = rest[rows]
            # The rest (< block values; what lies past it in the gather is overwritten).
            kb[r2, span] = kb[r2, np.minimum(pos[rows, None] + span, 2 * block - 1)]
            kb[r2, kept[:, None] + span] = k
            self.flatpos[rows] = self.rowoff[rows]
            self.fill[rows] = kept + block
            rest[rows] = kept + block
        self.left = int(rest.min())

    def tick(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row sends its packet at global tick ``g`` and processes tick ``g``.

        Returns fresh (lost, delivered) bool arrays of shape (2n,); ``best`` holds the
        freshest global tick. Payloads are stored separately (:meth:`store`).
        """
        if self.left <= 0:
            self._refill()
        self.left -= 1
        now = self.now
        now[()] = g
        a = self.kbuf.take(self.flatpos)
        self.flatpos += self._one
        lost = a < self._zero
        a += now
        if self.fifo:
            # A lost packet's tick is hugely negative: the maximum leaves `last` unchanged.
            a = np.maximum(a, self.last, out=self.last)
        fi = np.bitwise_and(a, self._mask, out=self._fi)
        np.copyto(fi, self._trash, where=lost)
        fi += self.cal_off
        self._r = r = g & self.mask
        # Send ticks only grow, so the newest packet of a slot is the one written last.
        self.cal_max_flat[fi] = g
        count = self.count
        if count:
            self.cal_cnt_flat[fi] += 1
            self.lost += lost
        best = self.best
        if self.scan:
            arr = self.arr
            arr[r] = a
            np.copyto(arr[r], -1, where=lost)
            self.sent_idx[r] = g
            here = arr == g
            here &= self.sent_idx[:, None] < best
            self.reordered += here.sum(axis=0)
        # Arrivals at tick g: one calendar column.
        newest = self.cal_max[:, r]
        delivered = newest > best
        if count:
            arrived = self.cal_cnt[:, r]
            self.stale += arrived
            self.stale -= delivered
            arrived.fill(0)
        np.maximum(best, newest, out=best)
        newest.fill(-1)
        return lost, delivered

    def store_actions(self, actions: np.ndarray) -> np.ndarray:
        """Queue this tick's actions; return the newest action arriving this tick per
        sub-env (a view, valid where the downlink delivered)."""
        n = self.n
        self.cal_act_flat[self._fi[:n]] = actions
        return self.cal_act[:, self._r]

    def store_observations(self, obs: np.ndarray) -> np.ndarray | None:
        """Queue this tick's observations (the newest arriving this tick are then in
        :meth:`arrived_observations`, also as :meth:`arrived_items`); return ``obs`` as
        opaque elements (:meth:`items`) where it :meth:`fits`, else None."""
        if self.obs_item is not None and self.fits(obs):
            items = self.items(obs)
            self.cal_obs_items_flat[self._fi[self.n :]] = items
            return items
        self.cal_obs_flat[self._fi[self.n :]] = obs
        return None

    def fits(self, obs: np.ndarray) -> bool:
        """True if ``obs`` can be viewed as opaque elements (:meth:`items`)."""
        return (
            obs.dtype == self.obs_dtype and obs.shape == self.obs_shape and obs.flags.c_contiguous
        )

    def items(self, obs: np.ndarray) -> np.ndarray:
        """A batch that :meth:`fits` as ``n`` opaque elements (a view)."""
        item = self.obs_item
        assert item is not None  # callers check obs_item first
        return obs.reshape(self.n, -1).view(item)[:, 0]

    def arrived_items(self) -> np.ndarray:
        """The newest observation arriving this tick per sub-env, as opaque elements (a
        view; valid where the uplink delivered)."""
        return self.cal_obs_items[self.n :, self._r]

    def arrived_observations(self) -> np.ndarray:
        """The newest observation arriving this tick per sub-env (a view, valid where the
        uplink delivered)."""
        return self.cal_obs[self.n :, self._r]
