"""Continuous actions as chains of tokens: per-dimension quantile normalisation, uniform bins.

A vision-language-action model (OpenVLA's recipe) emits one token per action dimension. Each
dimension ``x_d`` is normalised by a low and a high quantile of the data (1st and 99th
percentile by default) to ``u_d = clip(2 (x_d - lo_d) / (hi_d - lo_d) - 1, -1, 1)``, and
``[-1, 1]`` is cut into ``N`` bins of width ``2 / N``:

* encode: ``b_d = min(floor((u_d + 1) N / 2), N - 1)``, the token id ``offset + b_d``;
* decode: the bin centre ``u_d = -1 + (b_d + 1/2) 2 / N``, mapped back to the action range.

The decoded action differs from the (clipped) input by at most half a bin,
``(hi_d - lo_d) / (2 N)`` per dimension. Token ids are either the window ``0 .. N - 1``
(``vocab_size=None``) or the last ``N`` ids of a language model's vocabulary
(``offset = vocab_size - N``: ids 31,744 .. 31,999 for 256 bins of Llama's 32,000), so the
action tokens reuse the rarest text tokens.

Two mappings of bins to ids (``mapping``):

* ``"ascending"`` (the default above): ``N`` bins of width ``2 / N``, bin ``b`` is id
  ``offset + b``;
* ``"openvla"``: OpenVLA's ``ActionTokenizer``. The ``N`` *edges*
  ``linspace(-1, 1, N)`` cut ``[-1, 1]`` into ``N - 1`` intervals; ``np.digitize`` gives
  ``d in 1 .. N`` (``d = N`` only at ``u = +1``) and the id is ``vocab_size - d``, so ids
  run *downwards* as the action grows (``u = -1`` is the vocabulary's last id). Decoding
  takes ``i = clip(vocab_size - id - 1, 0, N - 2)`` and the centre of interval ``i``, so
  the two top ids (``u`` in the last interval, and ``u = +1``) decode alike. It needs a
  ``vocab_size``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_choice, check_float, check_int, quote

#: Bins per dimension by default (OpenVLA's 256).
DEFAULT_BINS = 256
#: What to do with an action outside the normalisation range.
OUT_OF_RANGE = ("clip", "raise")
#: How bins map to token ids (see the module docstring).
TOKEN_MAPPINGS = ("ascending", "openvla")


def _as_bounds(name: str, value: Any) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected an array of numbers, actual {quote(value)}") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-d array, actual shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: expected finite numbers, actual {quote(array.tolist())}")
    return array


@dataclass(frozen=True, eq=False)
class ActionTokenizer:
    """Box actions to token ids and back, one token per dimension.

    Models OpenVLA's action tokenizer: per-dimension bounds (``low``/``high``, usually the
    data's 1st and 99th percentiles), ``num_bins`` uniform bins on the normalised range and
    ids in a window of a vocabulary. A dimension with ``low == high`` (constant in the
    data) decodes to that constant.

    Args:
        low: Lower bound per dimension (mapped to ``-1``).
        high: Upper bound per dimension (mapped to ``+1``), ``>= low``.
        num_bins: Bins per dimension ``N`` (>= 2).
        vocab_size: ``None`` for ids ``0 .. N-1``; otherwise ids are the last ``N`` ids of
            a vocabulary of this size (``>= N``).
        out_of_range: ``"clip"`` clips an action outside ``[low, high]`` (and
            :meth:`encode_counted` counts it) or ``"raise"`` refuses it.
        mapping: ``"ascending"`` (``N`` bins, id ``offset + bin``) or ``"openvla"``
            (OpenVLA's ``N`` edges and ``vocab_size - digitize``; see the module
            docstring). Either way the ids are the window :attr:`token_ids`.

    Example:
        >>> tok = ActionTokenizer([-1.0, 0.0], [1.0, 2.0], num_bins=4)
        >>> tok.encode(np.array([0.1, 1.9])).tolist()
        [2, 3]
        >>> tok.decode(np.array([2, 3])).tolist()
        [0.25, 1.75]
        >>> ActionTokenizer([-1.0], [1.0], vocab_size=32000).token_ids[[0, -1]].tolist()
        [31744, 31999]

    Raises:
        TypeError: For bounds that are not numbers or a count that is not an int.
        ValueError: For bounds of different shapes, not finite or ``high < low``, fewer
            than 2 bins, a vocabulary smaller than the bins, an unknown ``out_of_range`` or
            ``mapping``, or ``mapping="openvla"`` without a ``vocab_size``.
    """

    low: np.ndarray
    high: np.ndarray
    num_bins: int = DEFAULT_BINS
    vocab_size: int | None = None
    out_of_range: str = "clip"
    mapping: str = "ascending"
    _width: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        low, high = _as_bounds("low", self.low), _as_bounds("high", self.high)
        if low.shape != high.shape:
            raise ValueError(f"low, high: expected one shape, actual {low.shape} and {high.shape}")
        if np.any(high < low):
            raise ValueError(
                f"high: expected >= low in every dimension, actual low {quote(low.tolist())}, "
                f"high {quote(high.tolist())}"
            )
        num_bins = check_int("num_bins", self.num_bins, low=2)
        if self.vocab_size is not None:
            vocab = check_int("vocab_size", self.vocab_size, low=1)
            if vocab < num_bins:
                raise ValueError(f"vocab_size: expected >= num_bins ({num_bins}), actual {vocab}")
        check_choice("out_of_range", self.out_of_range, OUT_OF_RANGE)
        check_choice("mapping", self.mapping, TOKEN_MAPPINGS)
        if self.mapping == "openvla" and self.vocab_size is None:
            raise ValueError("vocab_size: expected a vocabulary size with mapping='openvla'")
        low.setflags(write=False)
        high.setflags(write=False)
        width = high - low
        width.setflags(write=False)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "num_bins", num_bins)
        object.__setattr__(self, "_width", width)

    @classmethod
    def from_data(
        cls,
        actions: Any,
        num_bins: int = DEFAULT_BINS,
        quantiles: tuple[float, float] = (0.01, 0.99),
        **kwargs: Any,
    ) -> ActionTokenizer:
        """Bounds fitted to a batch of actions ``(n, dims)``: the given quantiles per dimension.

        Args:
            actions: Actions ``(n, dims)``, finite, at least one row.
            num_bins: Bins per dimension ``N`` (>= 2).
            quantiles: ``(q_low, q_high)``, ``0 <= q_low < q_high <= 1``: the quantiles of
                each dimension taken as ``low`` and ``high`` (default: 1st and 99th
                percentile).
            **kwargs: Further :class:`ActionTokenizer` fields: ``vocab_size``,
                ``out_of_range``, ``mapping``.

        Example:
            >>> data = np.stack([np.arange(101.0), np.full(101, 3.0)], axis=1)
            >>> tok = ActionTokenizer.from_data(data)
            >>> tok.low.tolist(), tok.high.tolist()
            ([1.0, 3.0], [99.0, 3.0])

        Raises:
            ValueError: For data that is not a finite 2-d array of at least one row, or
                quantiles outside ``0 <= q_low < q_high <= 1``.
        """
        data = np.asarray(actions, dtype=np.float64)
        if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] == 0:
            raise ValueError(f"actions: expected a (n, dims) array, actual shape {data.shape}")
        if not np.all(np.isfinite(data)):
            raise ValueError("actions: expected finite numbers, actual NaN or infinity")
        q_low = check_float("quantiles[0]", quantiles[0], 0.0, 1.0)
        q_high = check_float("quantiles[1]", quantiles[1], 0.0, 1.0)
        if q_low >= q_high:
            raise ValueError(f"quantiles: expected q_low < q_high, actual {quantiles}")
        low, high = np.quantile(data, [q_low, q_high], axis=0)
        return cls(low, high, num_bins=num_bins, **kwargs)

    @classmethod
    def from_space(
        cls, space: gym.Space, num_bins: int = DEFAULT_BINS, **kwargs: Any
    ) -> ActionTokenizer:
        """Bounds from a ``Box`` with finite bounds (flattened to one dimension per entry).

        Args:
            space: A ``gymnasium.spaces.Box`` with finite bounds; its ``low`` and ``high``,
                flattened, become the tokenizer's.
            num_bins: Bins per dimension ``N`` (>= 2).
            **kwargs: Further :class:`ActionTokenizer` fields: ``vocab_size``,
                ``out_of_range``, ``mapping``.

        Raises:
            TypeError: If ``space`` is not a ``gymnasium.spaces.Box``.
            ValueError: If a bound is infinite: fit the bounds from data instead.
        """
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"space: expected a gymnasium Box, actual {quote(space)}")
        low, high = space.low.ravel(), space.high.ravel()
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"space: expected finite bounds, actual {quote(space)} "
                "(fit the bounds with ActionTokenizer.from_data)"
            )
        return cls(low, high, num_bins=num_bins, **kwargs)

    @property
    def dims(self) -> int:
        """Number of action dimensions (tokens per action)."""
        return int(self.low.size)

    @property
    def offset(self) -> int:
        """The id of bin 0: 0, or ``vocab_size - num_bins``."""
        return 0 if self.vocab_size is None else self.vocab_size - self.num_bins

    @property
    def token_ids(self) -> np.ndarray:
        """The ``num_bins`` action ids, bin 0 first."""
        return np.arange(self.offset, self.offset + self.num_bins)

    @property
    def bin_width(self) -> np.ndarray:
        """Width of one bin per dimension in action units: ``(high - low) / N``, or
        ``(high - low) / (N - 1)`` with ``mapping="openvla"`` (``N`` edges)."""
        if self.mapping == "openvla":
            return self._width / (self.num_bins - 1)
        return self._width / self.num_bins

    def _check_actions(self, actions: Any) -> np.ndarray:
        try:
            array = np.asarray(actions, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"actions: expected an array of numbers, actual {quote(actions)}"
            ) from None
        if array.ndim == 0 or array.shape[-1] != self.dims:
            raise ValueError(
                f"actions: expected a last dimension of {self.dims}, actual shape {array.shape}"
            )
        if np.any(np.isnan(array)):
            raise ValueError("actions: expected numbers, actual NaN")
        return array

    def encode_counted(self, actions: Any) -> tuple[np.ndarray, int]:
        """Token ids ``(..., dims)`` of ``actions`` and how many entries were clipped.

        Args:
            actions: Actions ``(..., dims)`` (any leading shape), no NaN; an entry outside
                ``[low, high]`` (infinities included) is clipped and counted, or refused with
                ``out_of_range="raise"``.

        Raises:
            ValueError: For a wrong last dimension or NaN, and for an entry outside
                ``[low, high]`` when ``out_of_range="raise"``.
        """
        array = self._check_actions(actions)
        outside = (array < self.low) | (array > self.high)
        clipped = int(np.count_nonzero(outside))
        if clipped and self.out_of_range == "raise":
            index = tuple(int(i) for i in np.argwhere(outside)[0])
            raise ValueError(
                f"actions{list(index)}: expected within [{self.low[index[-1]]:g}, "
                f"{self.high[index[-1]]:g}], actual {array[index]:g}"
            )
        safe = np.where(self._width > 0, self._width, 1.0)
        unit = np.clip((array - self.low) / safe, 0.0, 1.0)  # (u + 1) / 2
        if self.mapping == "openvla":
            edges = np.linspace(-1.0, 1.0, self.num_bins)
            digitized = np.digitize(2.0 * unit - 1.0, edges)  # 1 .. N
            # A constant dimension takes an id that decodes to the middle (the constant).
            digitized = np.where(self._width > 0, digitized, self.num_bins // 2)
            return int(self.vocab_size or 0) - digitized.astype(np.int64), clipped
        bins = np.minimum(np.floor(unit * self.num_bins), self.num_bins - 1).astype(np.int64)
        # A constant dimension always takes the middle bin (it decodes to the constant).
        bins = np.where(self._width > 0, bins, self.num_bins // 2)
        return bins + self.offset, clipped

    def encode(self, actions: Any) -> np.ndarray:
        """Token ids ``(..., dims)`` (int64) of actions; see :meth:`encode_counted`.

        Args:
            actions: Actions ``(..., dims)``, no NaN; out-of-range entries are clipped or
                refused as ``out_of_range`` says.
        """
        return self.encode_counted(actions)[0]

    def decode(self, token_ids: Any) -> np.ndarray:
        """Actions ``(..., dims)`` (float64, the bin centres) of token ids ``(..., dims)``.

        Args:
            token_ids: Integer ids ``(..., dims)`` (any leading shape), each one of
                :attr:`token_ids`.

        Raises:
            TypeError: For ids that are not integers.
            ValueError: For a wrong last dimension or an id outside :attr:`token_ids`.
        """
        ids = np.asarray(token_ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"token_ids: expected integers, actual dtype {ids.dtype}")
        if ids.ndim == 0 or ids.shape[-1] != self.dims:
            raise ValueError(
                f"token_ids: expected a last dimension of {self.dims}, actual shape {ids.shape}"
            )
        bins = ids.astype(np.int64) - self.offset
        if np.any((bins < 0) | (bins >= self.num_bins)):
            bad = ids[(bins < 0) | (bins >= self.num_bins)].ravel()[0]
            raise ValueError(
                f"token_ids: expected ids in [{self.offset}, {self.offset + self.num_bins - 1}]"
                f", actual {int(bad)}"
            )
        if self.mapping == "openvla":
            edges = np.linspace(-1.0, 1.0, self.num_bins)
            centres = (edges[:-1] + edges[1:]) / 2.0
            index = np.clip(
                int(self.vocab_size or 0) - ids.astype(np.int64) - 1, 0, len(centres) - 1
            )
            unit = (centres[index] + 1.0) / 2.0
            return self.low + unit * self._width
        return self.low + (bins + 0.5) / self.num_bins * self._width

    def bins(self, token_ids: Any) -> np.ndarray:
        """Window indices ``0 .. N-1`` of token ids, ``id - offset`` (no range check; with
        ``mapping="openvla"`` index ``N - 1`` is ``u = -1``).

        Args:
            token_ids: Token ids of any shape (integers); ids outside :attr:`token_ids` give
                indices outside ``0 .. N-1``.
        """
        return np.asarray(token_ids, dtype=np.int64) - self.offset
