"""Instruction text as token ids, by a ``tokenizers`` tokenizer built here on the task's words.

A VLA reads its instruction through the language model's tokenizer. A randomly initialised
backbone has no tokenizer to download, so :class:`InstructionTokenizer` builds one locally
with Hugging Face's ``tokenizers`` library: a word-level model over the task's own
vocabulary (BabyAI's mission grammar by default, or the words of a corpus of missions,
:meth:`InstructionTokenizer.from_corpus`), lower-casing and commas dropped by its
normaliser, whitespace splitting, padding to a fixed length with id 0. Word ``i`` is id
``first_id + i``, so the ids stay below the action tokens at the vocabulary's tail. It is
saved and loaded as one ``tokenizer.json`` (:meth:`~InstructionTokenizer.save`), e.g. beside
a checkpoint, and a transformers ``PreTrainedTokenizerFast`` can wrap it
(:meth:`~InstructionTokenizer.as_transformers`).

It has the interface of :class:`~fleetgym.agents.tokens.missions.MissionVocabulary`
(``encode``, ``length``, ``max_id``), so the collectors and ``TokenPPO(vocabulary=...)``
take either. Needs the ``tokens`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.agents.tokens.missions import BABYAI_WORDS, PAD_ID
from fleetgym.extras import require
from fleetgym.validation import check_int, quote

PAD_TOKEN, UNK_TOKEN = "[PAD]", "[UNK]"


class InstructionTokenizer:
    """A word-level ``tokenizers.Tokenizer`` of the task's words: text to ``length`` ids.

    Args:
        words: The vocabulary (BabyAI's mission grammar by default), distinct words without
            spaces.
        length: Ids per instruction (longer ones are refused).
        first_id: The id of the first word (>= 1: 0 pads).

    Example:
        >>> tok = InstructionTokenizer(length=6)
        >>> tok.encode("Go to the red ball").tolist()
        [1, 2, 8, 14, 20, 0]
        >>> tok.encode("go to the pink ball")
        Traceback (most recent call last):
        ...
        ValueError: mission: expected words of the vocabulary, actual 'pink' in 'go to the pink ball'

    Raises:
        ValueError: For duplicate or empty words, a length < 1 or a first id < 1.
        DependencyNotInstalled: Without ``tokenizers`` (the ``tokens`` extra).
    """

    def __init__(
        self, words: Sequence[str] = BABYAI_WORDS, length: int = 8, first_id: int = 1
    ) -> None:
        tokenizers = require("tokenizers", "fleetgym.agents.tokens.InstructionTokenizer")
        words = tuple(words)
        bad = [w for w in words if not isinstance(w, str) or not w or w != w.lower() or " " in w]
        if not words or bad or len(set(words)) != len(words):
            raise ValueError(
                f"words: expected distinct lower-case words without spaces, actual "
                f"{quote(bad or words)}"
            )
        self.words = words
        self.length = check_int("length", length, low=1)
        self.first_id = check_int("first_id", first_id, low=PAD_ID + 1)
        vocab = {w: self.first_id + i for i, w in enumerate(words)}
        vocab[PAD_TOKEN] = PAD_ID
        vocab[UNK_TOKEN] = self.max_id + 1
        t = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=UNK_TOKEN))
        n = tokenizers.normalizers
        t.normalizer = n.Sequence([n.Lowercase(), n.Replace(",", " ")])
        t.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        t.enable_padding(length=self.length, pad_id=PAD_ID, pad_token=PAD_TOKEN)
        #: The ``tokenizers.Tokenizer`` itself (it pads to ``length``).
        self.tokenizer = t

    @classmethod
    def from_corpus(
        cls, texts: Iterable[str], length: int = 8, first_id: int = 1
    ) -> InstructionTokenizer:
        """Train the vocabulary on ``texts`` (``tokenizers``' ``WordLevelTrainer``).

        Words are ordered by the trainer (most frequent first), so one corpus gives one
        tokenizer.

        Args:
            texts: Instructions (any iterable of str, not empty); their words, lower-cased
                and split on spaces and commas, become the vocabulary.
            length: Ids per instruction (>= 1; longer instructions are refused).
            first_id: The id of the first word (>= 1: 0 pads).

        Raises:
            ValueError: For an empty corpus.
        """
        tokenizers = require("tokenizers", "fleetgym.agents.tokens.InstructionTokenizer")
        texts = [t for t in texts]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"texts: expected a non-empty list of str, actual {quote(texts)}")
        trainer_tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token=UNK_TOKEN))
        n = tokenizers.normalizers
        trainer_tok.normalizer = n.Sequence([n.Lowercase(), n.Replace(",", " ")])
        trainer_tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        trainer = tokenizers.trainers.WordLevelTrainer(
            special_tokens=[PAD_TOKEN, UNK_TOKEN], show_progress=False
        )
        trainer_tok.train_from_iterator(texts, trainer)
        vocab = trainer_tok.get_vocab()
        words = [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
        return cls([w for w in words if w not in (PAD_TOKEN, UNK_TOKEN)], length, first_id)

    @property
    def max_id(self) -> int:
        """The largest id it emits (the backbone's vocabulary must be larger)."""
        return self.first_id + len(self.words) - 1

    def encode(self, mission: str) -> np.ndarray:
        """The ids ``(length,)`` of an instruction, padded with 0.

        Args:
            mission: The instruction text: words of the vocabulary separated by spaces or
                commas, case ignored, at most ``length`` of them.

        Raises:
            TypeError: If ``mission`` is not a str.
            ValueError: For a word outside the vocabulary or more than ``length`` words.
        """
        if not isinstance(mission, str):
            raise TypeError(f"mission: expected a str, actual {quote(mission)}")
        encoding = self.tokenizer.encode(mission)
        count = int(sum(encoding.attention_mask))
        unknown = [
            mission.lower().replace(",", " ").split()[i]
            for i, t in enumerate(encoding.tokens[:count])
            if t == UNK_TOKEN
        ]
        if unknown:
            raise ValueError(
                f"mission: expected words of the vocabulary, actual {unknown[0]!r} in {mission!r}"
            )
        if count > self.length:
            raise ValueError(
                f"mission: expected at most {self.length} words, actual {count} in {mission!r}"
            )
        return np.asarray(encoding.ids, np.int64)

    def save(self, path: str | Path) -> Path:
        """Write ``tokenizer.json`` into the directory ``path`` (created); returns the file.

        The file is ``tokenizers``' own (``tokenizers.Tokenizer.from_file`` reads it); the
        length is its fixed padding, the first id its smallest word id.

        Args:
            path: The directory to write into (created, with its parents, if missing); a
                ``tokenizer.json`` already there is replaced.
        """
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / "tokenizer.json"
        self.tokenizer.save(str(file))
        return file

    @classmethod
    def load(cls, path: str | Path) -> InstructionTokenizer:
        """Read what :meth:`save` wrote (the directory or the ``tokenizer.json`` itself).

        Args:
            path: The directory :meth:`save` wrote into, or the path of the file itself.

        Raises:
            FileNotFoundError: If there is no such file.
            ValueError: If it is not an instruction tokenizer's file.
        """
        file = Path(path)
        file = file / "tokenizer.json" if file.is_dir() else file
        if not file.is_file():
            raise FileNotFoundError(f"path: expected a tokenizer.json, actual {str(file)!r}")
        try:
            data = json.loads(file.read_text())
            vocab, length = data["model"]["vocab"], data["padding"]["strategy"]["Fixed"]
            ranked = sorted(vocab.items(), key=lambda kv: kv[1])
            words = [w for w, _ in ranked if w not in (PAD_TOKEN, UNK_TOKEN)]
            first = min(i for w, i in ranked if w not in (PAD_TOKEN, UNK_TOKEN))
            return cls(words, int(length), first)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"path: expected an InstructionTokenizer's tokenizer.json, actual {str(file)!r}"
            ) from exc

    def as_transformers(self) -> Any:
        """A ``transformers.PreTrainedTokenizerFast`` around the same tokenizer."""
        transformers = require("transformers", "InstructionTokenizer.as_transformers")
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=self.tokenizer, pad_token=PAD_TOKEN, unk_token=UNK_TOKEN
        )

    def __repr__(self) -> str:
        return (
            f"InstructionTokenizer({len(self.words)} words, length={self.length}, "
            f"first_id={self.first_id})"
        )
