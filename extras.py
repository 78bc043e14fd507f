"""Optional dependencies: which extra installs which package, and lazy public names.

``pip install fleetgym`` installs the core (gymnasium, numpy, scipy): the network shim,
its compensation wrappers, traces, profiles and the remote env. Everything else is an
extra (``pip install "fleetgym[agents]"``, ``[sb3]``, ...). A feature used without its
extra raises :class:`~fleetgym.errors.DependencyNotInstalled`, which names the extra, at
the point of use; importing :mod:`fleetgym` or :mod:`fleetgym.wrappers` never fails for a
missing extra.

Example:
    >>> extra_for("torch"), extra_for("stable_baselines3.common"), extra_for("numpy")
    ('agents', 'sb3', None)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from fleetgym.errors import DependencyNotInstalled

#: Top-level module -> (the extra that installs it, the distribution's name).
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "torch": ("agents", "torch"),
    "tqdm": ("agents", "tqdm"),
    "stable_baselines3": ("sb3", "stable-baselines3"),
    "sb3_contrib": ("sb3", "sb3-contrib"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "mujoco": ("mujoco", "mujoco"),
    "ale_py": ("atari", "ale-py"),
    "cv2": ("atari", "opencv-python-headless"),
    "minigrid": ("minigrid", "minigrid"),
    "matplotlib": ("plots", "matplotlib"),
    "ray": ("ray", "ray"),
    "transformers": ("tokens", "transformers"),
    "peft": ("tokens", "peft"),
    "tokenizers": ("tokens", "tokenizers"),
    "ns3": ("ns3", "ns3"),
    "ns": ("ns3", "ns3"),
    "sphinx": ("docs", "sphinx"),
    "myst_parser": ("docs", "myst-parser"),
    "furo": ("docs", "furo"),
    "sphinx_copybutton": ("docs", "sphinx-copybutton"),
}


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (a dotted name), or ``None`` for a core module."""
    entry = OPTIONAL_MODULES.get(module.partition(".")[0])
    return entry[0] if entry else None


def missing_extra(error: BaseException, feature: str) -> DependencyNotInstalled | None:
    """``error`` as a :class:`DependencyNotInstalled` naming its extra, when it is a
    :class:`ModuleNotFoundError` for an optional package (else ``None``)."""
    if isinstance(error, DependencyNotInstalled):
        return error
    if not isinstance(error, ModuleNotFoundError):
        # Gymnasium raises its own DependencyNotInstalled from the ModuleNotFoundError.
        cause = error.__cause__ or error.__context__
        return missing_extra(cause, feature) if isinstance(cause, ImportError) else None
    if not error.name:
        return None
    root = error.name.partition(".")[0]
    if root not in OPTIONAL_MODULES:
        return None
    extra, package = OPTIONAL_MODULES[root]
    return DependencyNotInstalled(feature, package, extra)


def require(module: str, feature: str) -> Any:
    """Import ``module``, or raise :class:`DependencyNotInstalled` naming its extra.

    Example:
        >>> require("numpy", "this example").__name__
        'numpy'

    Raises:
        DependencyNotInstalled: When ``module`` (an optional package) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        converted = missing_extra(error, feature)
        if converted is None:
            raise
        raise converted from None


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) for names kept in submodules.

    ``exports`` maps each public name to the submodule (relative to ``package``) that
    defines it. The submodule is imported on first access, so a package whose names need
    torch imports without it and says which extra to install only when such a name is used.
    """

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(f"{package}.{submodule}")
        except ModuleNotFoundError as error:
            converted = missing_extra(error, f"{package}.{name}")
            if converted is None:
                raise
            raise converted from None
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__


#: Folders of the checkout that are not the library: their modules are imported as they are.
_UNGUARDED = ("tests", "benchmarks", "examples", "studies", "docs")


class _NamingLoader(importlib.abc.Loader):
    """A fleetgym module's loader whose ``exec_module`` turns a missing optional package
    into :class:`DependencyNotInstalled`; every other attribute is the real loader's."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        except ModuleNotFoundError as error:
            converted = missing_extra(error, module.__name__)
            if converted is None:
                raise
            raise converted from error

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _NamingFinder(importlib.abc.MetaPathFinder):
    """Finds ``fleetgym.*`` modules as the path finder does, with :class:`_NamingLoader`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if parts[0] != "fleetgym" or len(parts) < 2 or parts[1] in _UNGUARDED or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _NamingLoader(spec.loader)
        return spec


def guard_imports() -> None:
    """Make an import of any fleetgym module whose optional package is missing raise
    :class:`DependencyNotInstalled` (naming the extra), never a bare
    :class:`ModuleNotFoundError`. Called once by ``import fleetgym``; idempotent."""
    if not any(isinstance(finder, _NamingFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NamingFinder())
