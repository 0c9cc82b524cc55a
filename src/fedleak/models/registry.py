"""The model registry: names -> factories, and the one :func:`build` entry point.

A factory is a callable ``factory(spec, *, option=default, ...) -> nn.Module``. Its keyword-only
parameters are the options users may pass to :func:`build`; anything else is rejected with the
allowed names listed. Other modules (``models/imprint/``) add models with the
:func:`register` decorator.

:func:`build` seeds a *forked* copy of the CPU random number generator, so the same name, spec,
seed and options always give the same weights and the caller's global RNG state is left
untouched.
"""

from __future__ import annotations

import inspect
import numbers
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..errors import FedleakError, check_options, unknown_choice
from ..types import DataSpec

Factory = Callable[..., nn.Module]

#: Registered model names -> one-line description (insertion order = registration order).
MODELS: dict[str, str] = {}
_FACTORIES: dict[str, Factory] = {}


def register(name: str, description: str, *, replace: bool = False) -> Callable[[Factory], Factory]:
    """Decorator adding ``factory`` to the zoo under ``name``.

    ``factory(spec, *, opt=default, ...)`` must build a fresh model from the
    :class:`~fedleak.types.DataSpec`; it may draw random numbers from the global torch RNG
    (``build`` seeds and restores it). Registering a taken name raises unless ``replace``.
    """
    if not isinstance(name, str) or not name:
        raise FedleakError(f"model name must be a non-empty string, got {name!r}")

    def decorator(factory: Factory) -> Factory:
        if not callable(factory):
            raise FedleakError(f"model factory for {name!r} is not callable")
        existing = _FACTORIES.get(name)
        if existing is not None and existing is not factory and not replace:
            raise FedleakError(f"model {name!r} is already registered; pass replace=True to override it")
        _FACTORIES[name] = factory
        MODELS[name] = description
        return factory

    return decorator


def _option_defaults(factory: Factory) -> Optional[dict[str, Any]]:
    """Keyword-only parameters of ``factory`` with their defaults (``None``: accepts any)."""
    options: dict[str, Any] = {}
    for param in inspect.signature(factory).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            options[param.name] = None if param.default is inspect.Parameter.empty else param.default
    return options


def _factory(name: str) -> Factory:
    if name not in _FACTORIES:
        folder = _folder_factory(name)
        if folder is not None:
            return folder
        raise unknown_choice("model", name, MODELS)
    return _FACTORIES[name]


def is_model_folder(name) -> bool:
    """Whether ``name`` names a local folder (a Hugging Face model folder for :mod:`fedleak.models.hf`)."""
    import os

    return isinstance(name, str) and name not in _FACTORIES and os.path.isdir(name)


#: ``(matches, make)`` pairs, in order: a model named by a path (a model folder, a ``.gguf`` file) is built by the
#: first ``make(name)`` whose ``matches(name)`` is true (:mod:`fedleak.models.hf` registers its two)
PATH_FACTORIES: list = []


def register_path_factory(matches: Callable[[str], bool], make: Callable[[str], Factory]) -> None:
    """Let models named by a path be built: ``make(name)`` gives the factory when ``matches(name)``."""
    PATH_FACTORIES.append((matches, make))


def _folder_factory(name) -> Optional[Factory]:
    if not isinstance(name, str) or name in _FACTORIES:
        return None
    for matches, make in PATH_FACTORIES:
        if matches(name):
            return make(name)
    return None


def check(name, options: Optional[dict] = None) -> None:
    """The checks of model ``name`` that need no data, run before any data is read: a zoo name is known,
    a model folder's ``config.json`` and weight headers are sound (:func:`fedleak.models.hf.builders.check_folder`),
    a GGUF file is one (:func:`fedleak.models.hf.gguf.check_gguf`), and the names of ``options`` are ones its
    factory takes. One line naming ``name`` otherwise."""
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise FedleakError(f"model must be a zoo name, a model folder or a .gguf file, got {name!r}")
    if options:
        allowed = _option_defaults(_factory(name))
        if allowed is not None:
            check_options(f"model {name!r}", options, allowed)
    if name in _FACTORIES:
        return
    if name.lower().endswith(".gguf"):
        from .hf.gguf import check_gguf

        check_gguf(name)
    elif is_model_folder(name):
        from .hf.builders import check_folder

        check_folder(name)
    else:
        raise unknown_choice("model", name, MODELS)


def model_options(name: str) -> dict[str, Any]:
    """The options model ``name`` accepts, with their defaults (empty if it takes any)."""
    return dict(_option_defaults(_factory(name)) or {})


def build(name: str, spec: DataSpec, seed: int = 0, **options: Any) -> nn.Module:
    """Build model ``name`` for ``spec``: float32, on CPU, in train mode, deterministic in ``seed``.

    Unknown names and options raise :class:`~fedleak.errors.FedleakError` naming the allowed
    values. The global torch RNG state is the same after the call as before it.
    """
    factory = _factory(name)
    if not isinstance(spec, DataSpec):
        raise FedleakError(f"build({name!r}) needs a DataSpec, got {type(spec).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise FedleakError(f"model seed must be an integer, got {seed!r}")
    seed = int(seed)
    allowed = _option_defaults(factory)
    if allowed is not None:
        check_options(f"model {name!r}", options, allowed)
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        # Seed only the CPU generator: torch.manual_seed would also reseed (and leak into) CUDA.
        torch.random.default_generator.manual_seed(seed)
        model = factory(spec, **options)
    if not isinstance(model, nn.Module):
        raise FedleakError(f"model factory {name!r} returned {type(model).__name__}, not an nn.Module")
    model = model.to(device="cpu", dtype=torch.float32)
    model.train()
    return model
