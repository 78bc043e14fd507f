"""``TokenizedActions``: any Box-action env driven by action tokens, for anyone's agent."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.tokens.tokenizer import DEFAULT_BINS, ActionTokenizer
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_choice, quote

#: Action spaces the wrapper offers.
TOKEN_SPACES = ("multidiscrete", "tuple")


class TokenizedActions(gym.ActionWrapper[Any, Any, np.ndarray], gym.utils.RecordConstructorArgs):
    """A Box-action env whose actions are token ids, one per dimension.

    Models the action interface of a vision-language-action policy: the agent picks one of
    ``N`` tokens per action dimension and the wrapper decodes them to the bin centres of an
    :class:`~fleetgym.agents.tokens.tokenizer.ActionTokenizer` (see there for the maths).
    The action space is ``MultiDiscrete([N] * dims)`` (with ``start`` at the tokenizer's
    offset, so vocabulary ids pass as they are) or a ``Tuple`` of one ``Discrete(N)`` per
    dimension. Any discrete-action agent (SB3's PPO with MultiDiscrete, a factorised
    categorical) then trains on a continuous env.

    Args:
        env: An env with a ``Box`` action space.
        num_bins: Bins per dimension (ignored when ``tokenizer`` is given).
        tokenizer: A fitted tokenizer (its bounds need not be the Box's); by default one
            from the Box's bounds, which must then be finite.
        vocab_size: Ids from the tail of a vocabulary of this size (ignored with
            ``tokenizer``).
        space: ``"multidiscrete"`` or ``"tuple"``.

    Example:
        >>> env = TokenizedActions(gym.make("Pendulum-v1"), num_bins=8)
        >>> env.action_space
        MultiDiscrete([8])
        >>> env.action(np.array([7])).round(3).tolist()  # the top bin's centre
        [1.75]

    Raises:
        UnsupportedSpaceError: If the env's action space is not a ``Box``.
        ValueError: If the tokenizer's dimensions differ from the Box's, or the Box has
            infinite bounds and no tokenizer is given.
    """

    def __init__(
        self,
        env: gym.Env,
        num_bins: int = DEFAULT_BINS,
        tokenizer: ActionTokenizer | None = None,
        vocab_size: int | None = None,
        space: str = "multidiscrete",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, num_bins=num_bins, tokenizer=tokenizer, vocab_size=vocab_size, space=space
        )
        check_choice("space", space, TOKEN_SPACES)
        box = env.action_space
        if not isinstance(box, gym.spaces.Box):
            raise UnsupportedSpaceError(f"env.action_space: expected a Box, actual {quote(box)}")
        if tokenizer is None:
            tokenizer = ActionTokenizer.from_space(box, num_bins, vocab_size=vocab_size)
        elif not isinstance(tokenizer, ActionTokenizer):
            raise TypeError(f"tokenizer: expected an ActionTokenizer, actual {quote(tokenizer)}")
        if tokenizer.dims != int(np.prod(box.shape)):
            raise ValueError(
                f"tokenizer: expected {int(np.prod(box.shape))} dimensions (the env's "
                f"action space {box}), actual {tokenizer.dims}"
            )
        super().__init__(env)
        self.tokenizer = tokenizer
        self._box = box
        self._space_kind = space
        n, offset = tokenizer.num_bins, tokenizer.offset
        if space == "multidiscrete":
            self.action_space = gym.spaces.MultiDiscrete(
                np.full(tokenizer.dims, n, dtype=np.int64),
                start=np.full(tokenizer.dims, offset, dtype=np.int64),
            )
        else:
            self.action_space = gym.spaces.Tuple(
                [gym.spaces.Discrete(n, start=offset) for _ in range(tokenizer.dims)]
            )

    def action(self, action: Any) -> np.ndarray:
        """The env's Box action for token ids (a tuple of ids is stacked first).

        Args:
            action: One token id per dimension, each of the tokenizer's ``token_ids``: an
                array ``(dims,)`` (``"multidiscrete"``) or a tuple of ``dims`` ids
                (``"tuple"``).

        Returns:
            The bin centres, clipped to the env's Box, in its shape and dtype.
        """
        ids = np.asarray(tuple(action) if self._space_kind == "tuple" else action)
        if ids.shape != (self.tokenizer.dims,):
            raise ValueError(
                f"action: expected {self.tokenizer.dims} token ids, actual {quote(action)}"
            )
        decoded = self.tokenizer.decode(ids).reshape(self._box.shape)
        # Bins fitted to data may reach outside the env's Box; keep the env's contract.
        return np.clip(decoded, self._box.low, self._box.high).astype(self._box.dtype)
