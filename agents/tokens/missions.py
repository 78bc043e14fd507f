"""Mission text as instruction token ids: a small fixed word list, never a downloaded tokenizer.

BabyAI's missions come from a small grammar (``go to the red ball``, ``pick up a key``,
``open the door on your left``, ``put ... next to ...``, joined by ``and`` / ``then`` /
``after you``). :class:`MissionVocabulary` maps each word of that grammar to one id of the
backbone's vocabulary (``first_id``, ``first_id + 1``, ...; id 0 pads) and a mission to a
fixed-length row of ids, the ``instruction`` a
:class:`~fleetgym.agents.tokens.policy.TokenPolicy` built with ``instruction_length`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fleetgym.validation import check_int, quote

#: The words of BabyAI's mission grammar (verbs, determiners, colours, objects, locations).
BABYAI_WORDS = (
    "go", "to", "pick", "up", "open", "put", "next", "the", "a", "and", "then", "after",
    "you", "red", "green", "blue", "purple", "yellow", "grey", "ball", "box", "key", "door",
    "on", "your", "left", "right", "in", "front", "of", "behind",
)  # fmt: skip
#: The padding id.
PAD_ID = 0


class InstructionEncoder(Protocol):
    """What turns an instruction into ids: :class:`MissionVocabulary` or
    :class:`~fleetgym.agents.tokens.instructions.InstructionTokenizer`."""

    @property
    def length(self) -> int: ...  # noqa: D102

    @property
    def max_id(self) -> int: ...  # noqa: D102

    def encode(self, mission: str) -> np.ndarray: ...  # noqa: D102


@dataclass(frozen=True)
class MissionVocabulary:
    """Words to ids: word ``i`` is ``first_id + i``, a mission is ``length`` ids padded with 0.

    Args:
        words: The word list (BabyAI's grammar by default), no duplicates.
        length: Ids per mission (longer missions are refused).
        first_id: The id of the first word (>= 1: 0 pads).

    Example:
        >>> vocab = MissionVocabulary(length=6)
        >>> vocab.encode("go to the red ball").tolist()
        [1, 2, 8, 14, 20, 0]
        >>> vocab.encode("go to the pink ball")
        Traceback (most recent call last):
        ...
        ValueError: mission: expected words of the vocabulary, actual 'pink' in 'go to the pink ball'

    Raises:
        ValueError: For duplicate words, a length < 1 or a first id < 1.
    """

    words: tuple[str, ...] = BABYAI_WORDS
    length: int = 8
    first_id: int = 1

    def __post_init__(self) -> None:
        if len(set(self.words)) != len(self.words) or not self.words:
            raise ValueError(f"words: expected distinct words, actual {quote(self.words)}")
        check_int("length", self.length, low=1)
        check_int("first_id", self.first_id, low=PAD_ID + 1)

    @property
    def max_id(self) -> int:
        """The largest id it emits (the backbone's vocabulary must be larger)."""
        return self.first_id + len(self.words) - 1

    def encode(self, mission: str) -> np.ndarray:
        """The ids ``(length,)`` of a mission (lower-cased, split on spaces, commas dropped).

        Args:
            mission: The mission text: words of ``words`` separated by spaces or commas,
                case ignored, at most ``length`` of them.

        Raises:
            TypeError: If ``mission`` is not a str.
            ValueError: For a word outside the list or a mission longer than ``length``.
        """
        if not isinstance(mission, str):
            raise TypeError(f"mission: expected a str, actual {quote(mission)}")
        index = {w: self.first_id + i for i, w in enumerate(self.words)}
        tokens = mission.lower().replace(",", " ").split()
        unknown = [w for w in tokens if w not in index]
        if unknown:
            raise ValueError(
                f"mission: expected words of the vocabulary, actual {unknown[0]!r} in {mission!r}"
            )
        if len(tokens) > self.length:
            raise ValueError(
                f"mission: expected at most {self.length} words, actual {len(tokens)} in {mission!r}"
            )
        ids = np.full(self.length, PAD_ID, np.int64)
        ids[: len(tokens)] = [index[w] for w in tokens]
        return ids
