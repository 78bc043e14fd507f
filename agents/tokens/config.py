"""The settings of ``TokenPolicy.from_pretrained``, frozen and validated once.

fleetgym 1.x took 24 keywords; 2.0 groups them along the seams of the code:
:class:`TokenHeadConfig` (the action and observation head, the value head and the
prompt's instruction length, the keywords of :class:`~fleetgym.agents.tokens.TokenPolicy`),
:class:`VisionConfig` (the image inside the observation and its tower) and
:class:`LoraConfig` (the adapters on the LM). A 1.x keyword fails with a TypeError naming
its 2.0 place (:data:`FROM_PRETRAINED_MOVED`). Each config round-trips through
``dataclasses.asdict`` and JSON (``from_dict``); a vision tower given as a
``transformers`` config does not (give a directory to save it).

Example:
    >>> import dataclasses, json
    >>> head = TokenHeadConfig(num_bins=16, chunk=2, value_head="mean")
    >>> TokenHeadConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(head)))) == head
    True
    >>> LoraConfig(rank=4).targets
    ('q_proj', 'v_proj')
    >>> VisionConfig(image_shape=(7, 7, 4), layout="whc")
    Traceback (most recent call last):
    ...
    ValueError: image_layout: expected one of ('hwc', 'chw'), actual 'whc'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from fleetgym.agents.tokens.lora import DEFAULT_LORA_TARGETS
from fleetgym.agents.tokens.tokenizer import DEFAULT_BINS
from fleetgym.agents.tokens.value_heads import VALUE_HEADS, VALUE_INPUTS
from fleetgym.agents.tokens.vision import IMAGE_LAYOUTS
from fleetgym.validation import check_bool, check_choice, check_float, check_int, quote

__all__ = [
    "FROM_PRETRAINED_MOVED",
    "LoraConfig",
    "TokenHeadConfig",
    "VisionConfig",
    "as_token_config",
]

_Config = TypeVar("_Config")

_HEAD = "head=TokenHeadConfig({key}=...)"
#: Keywords of fleetgym 1.x's ``TokenPolicy.from_pretrained`` and where each went in 2.0.
FROM_PRETRAINED_MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "num_bins",
            "chunk",
            "obs_tokens",
            "value_head",
            "max_steps",
            "slim_head",
            "value_input",
            "instruction_length",
        ),
        _HEAD,
    ),
    "image_shape": "vision=VisionConfig(image_shape=...)",
    "image_layout": "vision=VisionConfig(layout=...)",
    "freeze_vision": "vision=VisionConfig(freeze=...)",
    "lora_rank": "lora=LoraConfig(rank=...)",
    "lora_alpha": "lora=LoraConfig(alpha=...)",
    "lora_targets": "lora=LoraConfig(targets=...)",
    "lora_dropout": "lora=LoraConfig(dropout=...)",
}


def _from_dict(cls: type[_Config], values: Mapping[str, Any]) -> _Config:
    if not isinstance(values, Mapping):
        raise TypeError(f"{cls.__name__}: expected a mapping of fields, actual {quote(values)}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(
            f"{cls.__name__}: expected fields among {sorted(known)}, actual unknown {unknown}"
        )
    return cls(**values)


@dataclass(frozen=True)
class TokenHeadConfig:
    """The action and observation head of a token policy, and its prompt's instruction.

    Args:
        num_bins: Bins per ``Box`` entry of the action tokenizer built for
            ``action_space`` (2 or more; unused with a fitted ``tokenizer``).
        chunk: Actions ``K`` per decision.
        obs_tokens: Positions the proprio part of the observation is projected to.
        instruction_length: Instruction tokens per observation (0: no instruction).
        value_head: ``"attention"``, ``"mean"`` or ``"first"``
            (:data:`~fleetgym.agents.tokens.VALUE_HEADS`).
        max_steps: The attention value head's step normaliser.
        slim_head: Slice the LM head to the action rows and drop the full head.
        value_input: ``"prefix"`` (a state value) or ``"actions"``
            (:data:`~fleetgym.agents.tokens.VALUE_INPUTS`).

    Raises:
        TypeError / ValueError: For a value of the wrong type or out of its range, naming it.
    """

    num_bins: int = DEFAULT_BINS
    chunk: int = 1
    obs_tokens: int = 1
    instruction_length: int = 0
    value_head: str = "attention"
    max_steps: int = 1000
    slim_head: bool = True
    value_input: str = "prefix"

    def __post_init__(self) -> None:
        check_int("num_bins", self.num_bins, 2)
        check_int("chunk", self.chunk, 1)
        check_int("obs_tokens", self.obs_tokens, 1)
        check_int("instruction_length", self.instruction_length, 0)
        check_choice("value_head", self.value_head, VALUE_HEADS)
        check_int("max_steps", self.max_steps, 1)
        check_bool("slim_head", self.slim_head)
        check_choice("value_input", self.value_input, VALUE_INPUTS)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TokenHeadConfig:
        """The config of ``dataclasses.asdict(config)`` (after JSON too).

        Args:
            values: Field name -> value, as in ``dataclasses.asdict(config)``, also after a
                JSON round trip; fields left out take their defaults.

        Raises:
            TypeError: For a mapping of another type, unknown fields, or a value of the
                wrong type (naming it).
            ValueError: For a value out of its range, naming it.
        """
        return _from_dict(cls, values)

    def policy_kwargs(self) -> dict[str, Any]:
        """The keywords of :class:`~fleetgym.agents.tokens.TokenPolicy` (all but
        ``num_bins``, which the tokenizer holds)."""
        values = dataclasses.asdict(self)
        del values["num_bins"]
        return values


@dataclass(frozen=True)
class VisionConfig:
    """The image inside the observation and the vision tower that reads it.

    Args:
        image_shape: The image's shape in ``layout`` order (``None``: no image, no tower).
        layout: ``"hwc"`` or ``"chw"`` (:data:`~fleetgym.agents.tokens.IMAGE_LAYOUTS`).
        tower: A directory or a ``transformers`` config of a vision model; ``None``: the
            checkpoint's own (a vision-language model's) or ``<path>/vision``.
        freeze: Freeze a separately loaded tower (its projector stays trainable).

    Raises:
        TypeError / ValueError: For a value of the wrong type or out of its range, or a
            ``tower`` without an ``image_shape``, naming it.
    """

    image_shape: tuple[int, int, int] | None = None
    layout: str = "hwc"
    tower: Any = None
    freeze: bool = False

    def __post_init__(self) -> None:
        shape = self.image_shape
        if shape is not None:
            if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
                raise TypeError(f"image_shape: expected 3 sizes or None, actual {quote(shape)}")
            sizes = tuple(shape)
            if len(sizes) != 3:
                raise ValueError(f"image_shape: expected 3 sizes, actual {quote(shape)}")
            sizes = tuple(check_int(f"image_shape[{i}]", s, 1) for i, s in enumerate(sizes))
            object.__setattr__(self, "image_shape", sizes)
        check_choice("image_layout", self.layout, IMAGE_LAYOUTS)
        if isinstance(self.tower, os.PathLike):
            object.__setattr__(self, "tower", os.fspath(self.tower))
        if self.tower is not None and shape is None:
            raise ValueError(
                "image_shape: expected the image's shape for the vision tower, actual None"
            )
        check_bool("freeze", self.freeze)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> VisionConfig:
        """The config of ``dataclasses.asdict(config)`` (after JSON too).

        Args:
            values: Field name -> value, as in ``dataclasses.asdict(config)``, also after a
                JSON round trip (a list ``image_shape`` becomes a tuple); fields left out
                take their defaults.

        Raises:
            TypeError: For a mapping of another type, unknown fields, or a value of the
                wrong type (naming it).
            ValueError: For a value out of its range, naming it.
        """
        return _from_dict(cls, values)


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters on the LM (:func:`~fleetgym.agents.tokens.apply_lora`).

    Args:
        rank: ``r`` (``0``: no adapters, every weight trains).
        alpha: The scale numerator (``alpha / r``, > 0).
        targets: Last name components of the layers to adapt (non-empty).
        dropout: Dropout on the adapter's input, in ``[0, 1]``.

    Raises:
        TypeError / ValueError: For a value of the wrong type or out of its range, naming it.
    """

    rank: int = 0
    alpha: float = 16.0
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_int("lora_rank", self.rank, 0)
        object.__setattr__(self, "alpha", check_float("lora_alpha", self.alpha, 0.0, strict=True))
        object.__setattr__(self, "dropout", check_float("lora_dropout", self.dropout, 0.0, 1.0))
        targets = self.targets
        if (
            isinstance(targets, (str, bytes))
            or not hasattr(targets, "__iter__")
            or not tuple(targets)
            or not all(isinstance(t, str) for t in targets)
        ):
            raise TypeError(
                f"lora_targets: expected a non-empty list of names, actual {quote(targets)}"
            )
        object.__setattr__(self, "targets", tuple(targets))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> LoraConfig:
        """The config of ``dataclasses.asdict(config)`` (after JSON too).

        Args:
            values: Field name -> value, as in ``dataclasses.asdict(config)``, also after a
                JSON round trip (a list ``targets`` becomes a tuple); fields left out take
                their defaults.

        Raises:
            TypeError: For a mapping of another type, unknown fields, or a value of the
                wrong type (naming it).
            ValueError: For a value out of its range, naming it.
        """
        return _from_dict(cls, values)


def as_token_config(cls: type[_Config], value: Any, name: str) -> _Config:
    """``value`` as a ``cls`` config: itself, ``cls.from_dict`` of a dict, ``cls()`` for None.

    Raises:
        TypeError: Naming ``name``, for another type (the 1.x ``vision`` tower included:
            it moved to ``VisionConfig(tower=...)``).
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return _from_dict(cls, value)
    hint = " (the 1.x tower moved to vision=VisionConfig(tower=...))" if name == "vision" else ""
    raise TypeError(
        f"{name}: expected a {cls.__name__}, a dict of its fields or None, actual "
        f"{quote(value)}{hint}"
    )
