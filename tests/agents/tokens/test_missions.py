"""MissionVocabulary: ids of BabyAI's grammar words, padding, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.tokens.missions import BABYAI_WORDS, PAD_ID, MissionVocabulary


def test_words_map_to_consecutive_ids_and_missions_pad():
    vocab = MissionVocabulary(length=12, first_id=100)
    ids = vocab.encode("Pick up a key, then open the door on your left")
    words = "pick up a key then open the door on your left".split()
    assert ids.tolist() == [100 + BABYAI_WORDS.index(w) for w in words] + [PAD_ID]
    assert vocab.max_id == 100 + len(BABYAI_WORDS) - 1
    short = vocab.encode("go to the red ball")
    assert (
        short.dtype == np.int64
        and np.all(short[5:] == PAD_ID)
        and short.shape == (12,)
        and np.all(short[:5] > 0)
    )


def test_refusals():
    vocab = MissionVocabulary(length=3)
    with pytest.raises(ValueError, match="at most 3 words, actual 5"):
        vocab.encode("go to the red ball")
    with pytest.raises(ValueError, match="'pink'"):
        vocab.encode("pink")
    with pytest.raises(TypeError, match="expected a str"):
        vocab.encode(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct words"):
        MissionVocabulary(words=("go", "go"))
    with pytest.raises(ValueError, match="first_id"):
        MissionVocabulary(first_id=0)
