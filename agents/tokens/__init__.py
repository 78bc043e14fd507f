"""Token-level action policies: the machinery of vision-language-action (VLA) models at laptop scale.

* :mod:`~fleetgym.agents.tokens.tokenizer`: :class:`ActionTokenizer`, Box actions to token
  ids and back (per-dimension quantile normalisation, ``N`` uniform bins, ids in a window
  or the tail of a vocabulary);
* :mod:`~fleetgym.agents.tokens.wrapper`: :class:`TokenizedActions`, a Gymnasium action
  wrapper that drives any Box env with token ids;
* :mod:`~fleetgym.agents.tokens.head`: :class:`SlimActionHead`, an LM head cut to the action
  rows, and :func:`action_log_softmax`, the one restricted distribution;
* :mod:`~fleetgym.agents.tokens.value_heads`: attention-pooled (AcceRL), mean-pooled and
  first-action-token (RL4VLA) value heads;
* :mod:`~fleetgym.agents.tokens.backbones`: causal LM backbones (a pure-torch transformer,
  any Hugging Face causal LM, a random ``LlamaConfig`` model with the ``tokens`` extra);
* :mod:`~fleetgym.agents.tokens.policy`: :class:`TokenPolicy`, the VLA-shaped actor-critic.
* :mod:`~fleetgym.agents.tokens.missions`: :class:`MissionVocabulary`, mission text (BabyAI's
  grammar) as instruction ids from a fixed word list.

The ratio levels (token, action, chunk) of its updates are in
:mod:`fleetgym.agents.learners.losses`. Depends on :mod:`fleetgym.agents.policies` and
:mod:`fleetgym.agents.types` at most; the learners may import it. Importing the package
imports neither torch nor ``transformers``; the torch modules are imported by path.
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
