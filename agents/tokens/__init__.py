"""Token-level action policies: the machinery of vision-language-action (VLA) models at laptop scale.

* :mod:`~fleetgym.agents.tokens.tokenizer`: :class:`ActionTokenizer`, Box actions to token
  ids and back (per-dimension quantile normalisation, ``N`` uniform bins, ids in a window
  or the tail of a vocabulary);
* :mod:`~fleetgym.agents.tokens.wrapper`: :class:`TokenizedActions`, a Gymnasium action
  wrapper that drives any Box env with token ids.

Depends on :mod:`fleetgym.agents.policies` and :mod:`fleetgym.agents.types` at most; the
learners may import it. Importing it does not import torch or ``transformers``.
"""

from __future__ import annotations

from fleetgym.agents.tokens.tokenizer import DEFAULT_BINS, OUT_OF_RANGE, ActionTokenizer
from fleetgym.agents.tokens.wrapper import TOKEN_SPACES, TokenizedActions

__all__ = [
    "DEFAULT_BINS",
    "OUT_OF_RANGE",
    "TOKEN_SPACES",
    "ActionTokenizer",
    "TokenizedActions",
]
