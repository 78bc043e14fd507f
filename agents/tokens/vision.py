"""Images as tokens: a vision tower whose patch embeddings are projected into the LM's width.

:class:`VisionPrefix` turns the image part of an observation into ``P_img`` prefix
positions of a :class:`~fleetgym.agents.tokens.policy.TokenPolicy`, the way a VLA does
(OpenVLA, TinyVLA): a vision transformer (ViT, SigLIP, CLIP or a vision-language model's
own tower) runs on the image, its last hidden states (one per patch, plus a CLS token for
ViT) go through a projector (a new ``nn.Linear`` to the language model's width by default,
or the checkpoint's own, e.g. Llava's ``multi_modal_projector``) and are placed in front of
the proprio and instruction tokens.

The image travels inside the flat observation vector (so the collectors, the learner's
columns and the inference server's request rows stay flat): its first
``prod(image_shape)`` entries, in ``"hwc"`` order (BabyAI's 7x7x3 grid, an RGB render) or
``"chw"``. An image smaller than the tower's ``image_size`` is zero-padded at the bottom
and right (BabyAI's 7x7 grid in an 8x8 frame of 4x4 patches gives 4 image tokens); a
larger one is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fleetgym.agents.tokens.local import checkpoint_dir
from fleetgym.extras import require
from fleetgym.validation import check_choice, check_int, quote

#: Orders of the image's entries inside the observation vector.
IMAGE_LAYOUTS = ("hwc", "chw")


def _config_int(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if not isinstance(value, int):
        raise TypeError(f"tower: expected a config with an int {name!r}, actual {quote(value)}")
    return value


class VisionPrefix(nn.Module):
    """A vision tower and a projector: images to ``(B, P_img, H_lm)`` prefix embeddings.

    Args:
        tower: A Hugging Face vision model (``config.image_size``, ``config.num_channels``,
            ``config.hidden_size``; ``forward(pixel_values=...)`` with a
            ``last_hidden_state``).
        hidden_size: The language model's width ``H_lm``.
        image_shape: The image's shape inside the observation, in ``layout`` order.
        layout: ``"hwc"`` or ``"chw"``.
        projector: Maps the tower's width to ``hidden_size`` (a new ``nn.Linear`` when
            ``None``).

    Example:
        >>> try:
        ...     from transformers import SiglipVisionConfig, SiglipVisionModel
        ... except ImportError:
        ...     SiglipVisionModel = None
        >>> if SiglipVisionModel is not None:
        ...     cfg = SiglipVisionConfig(hidden_size=16, intermediate_size=32,
        ...         num_hidden_layers=1, num_attention_heads=2, image_size=8, patch_size=4)
        ...     vision = VisionPrefix(SiglipVisionModel(cfg), 64, image_shape=(7, 7, 3))
        ...     assert vision(torch.zeros(2, 147)).shape == (2, 4, 64)

    Raises:
        TypeError: For a tower without those config fields.
        ValueError: For an image larger than the tower's ``image_size``, of another channel
            count, or a projector that does not give ``hidden_size``.
    """

    def __init__(
        self,
        tower: nn.Module,
        hidden_size: int,
        image_shape: tuple[int, int, int],
        layout: str = "hwc",
        projector: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(tower, nn.Module) or not hasattr(tower, "config"):
            raise TypeError(f"tower: expected a Hugging Face vision model, actual {quote(tower)}")
        self.layout = check_choice("layout", layout, IMAGE_LAYOUTS)
        shape = tuple(image_shape)
        if len(shape) != 3:
            raise ValueError(f"image_shape: expected 3 sizes, actual {quote(image_shape)}")
        dims = tuple(check_int("image_shape", s, low=1) for s in shape)
        self.image_shape: tuple[int, int, int] = (dims[0], dims[1], dims[2])
        h, w, c = dims if layout == "hwc" else (dims[1], dims[2], dims[0])
        config = tower.config
        size, channels = _config_int(config, "image_size"), _config_int(config, "num_channels")
        if c != channels:
            raise ValueError(
                f"image_shape: expected {channels} channels (the tower's num_channels), "
                f"actual {c} in {self.image_shape} ({layout})"
            )
        if h > size or w > size:
            raise ValueError(
                f"image_shape: expected at most {size}x{size} (the tower's image_size; smaller "
                f"images are zero-padded), actual {h}x{w}"
            )
        self.hw = (h, w)
        self.frame = size
        self.tower = tower
        self.hidden_size = check_int("hidden_size", hidden_size, low=1)
        width = _config_int(config, "hidden_size")
        self.projector = projector if projector is not None else nn.Linear(width, hidden_size)
        with torch.no_grad():
            probe = self._project(torch.zeros(1, c, size, size))
        if probe.ndim != 3 or probe.shape[-1] != self.hidden_size:
            raise ValueError(
                f"projector: expected embeddings of width {self.hidden_size}, actual shape "
                f"{tuple(probe.shape)}"
            )
        #: Prefix positions per image (patches, plus a CLS token where the tower has one).
        self.num_tokens = int(probe.shape[1])

    @property
    def image_entries(self) -> int:
        """Entries of the image in the flat observation vector."""
        h, w = self.hw
        return h * w * (self.image_shape[2] if self.layout == "hwc" else self.image_shape[0])

    def _project(self, pixels: torch.Tensor) -> torch.Tensor:
        out = self.tower(pixel_values=pixels)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return self.projector(hidden)

    def pixels(self, flat: torch.Tensor) -> torch.Tensor:
        """The tower's input ``(B, C, S, S)`` of image entries ``(B, prod(image_shape))``.

        Args:
            flat: The image entries of each observation, ``(B, prod(image_shape))`` in
                ``layout`` order; zero-padded at the bottom and right to the tower's
                ``image_size`` ``S`` and cast to the tower's dtype.
        """
        if flat.ndim != 2 or flat.shape[1] != self.image_entries:
            raise ValueError(
                f"image: expected shape (B, {self.image_entries}), actual {tuple(flat.shape)}"
            )
        image = flat.view(flat.shape[0], *self.image_shape)
        if self.layout == "hwc":
            image = image.permute(0, 3, 1, 2)
        h, w = self.hw
        pad = (0, self.frame - w, 0, self.frame - h)
        dtype = next(self.tower.parameters()).dtype
        return nn.functional.pad(image, pad).to(dtype)

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        """Prefix embeddings ``(B, num_tokens, hidden_size)`` of flat images.

        Args:
            flat: The image entries of each observation, ``(B, prod(image_shape))`` in
                ``layout`` order (the first :attr:`image_entries` of the observation).
        """
        return self._project(self.pixels(flat))


def load_vision_tower(path_or_config: Any, local_files_only: bool = True) -> nn.Module:
    """A vision tower from a local directory or a config (random weights); nothing downloaded.

    A directory holding a full CLIP/SigLIP model gives its ``vision_model``.

    Raises:
        FileNotFoundError: For a path that is not a directory.
        TypeError: For a config or checkpoint that is not a vision model.
        DependencyNotInstalled: Without ``transformers`` (the ``tokens`` extra).
    """
    transformers = require("transformers", "fleetgym.agents.tokens.VisionPrefix")
    if isinstance(path_or_config, transformers.PretrainedConfig):
        model = transformers.AutoModel.from_config(path_or_config)
    else:
        path = checkpoint_dir("vision", path_or_config)
        model = transformers.AutoModel.from_pretrained(path, local_files_only=local_files_only)
    tower = getattr(model, "vision_model", None)
    if tower is not None and hasattr(model, "text_model"):
        return tower  # a full CLIP/SigLIP: its vision half
    if not hasattr(model.config, "image_size"):
        raise TypeError(
            f"vision: expected a vision model (a config with image_size), actual "
            f"{type(model).__name__}"
        )
    return model
