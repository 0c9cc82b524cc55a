"""The audited model: a zoo name or the user's ``MODULE:FACTORY``, optionally with trained weights.

* ``NAME`` — :func:`fedleak.models.build` (``fedleak models`` lists them).
* ``MODULE:FACTORY`` — ``MODULE`` an importable module (the working directory is searched first, as
  ``python -m`` does) or a path to a ``.py`` file; ``FACTORY`` a callable in it returning an
  ``nn.Module``, called with the :class:`~fedleak.types.DataSpec` if it takes a positional argument,
  else with none, under a fixed torch seed (``model_seed``) so the weights are reproducible.
* ``weights`` — a ``.safetensors`` file, or a ``.pt``/``.pth`` state dict read with
  ``torch.load(weights_only=True)`` (never unpickled); checked against the architecture name by
  name (missing, unexpected and wrong-shape entries are named in the error).

:func:`check_fits` runs the model on one client input, so data of the wrong shape fails here, with
one line, before any attack starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec


def is_factory_path(name: str) -> bool:
    return ":" in name


def _import(module_name: str):
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = Path(module_name)
        if not path.is_file():
            raise FedleakError(f"model module file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"fedleak_user_model_{abs(hash(str(path.resolve())))}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's module: any error is theirs, reported in one line
            raise FedleakError(f"model module {path} failed to import: {type(exc).__name__}: {exc}") from None
        return module
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise FedleakError(f"model module {module_name!r} cannot be imported ({exc}); give an importable module "
                           "or a .py path, e.g. mymodels:build or path/to/models.py:build") from None
    except Exception as exc:
        raise FedleakError(f"model module {module_name!r} failed to import: {type(exc).__name__}: {exc}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _find(path: str) -> None:
    """A ``.py`` model module exists (found, not run)."""
    if not Path(path).is_file():
        raise FedleakError(f"model module file {path} does not exist")


def _takes_argument(factory) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def check_model(name, weights: Optional[str] = None, *, load: bool = True):
    """The checks of ``--model`` (and ``--weights``) that need no data: a zoo name, folder or GGUF file through
    :func:`fedleak.models.check`; a ``.safetensors`` checkpoint's header read; ``MODULE:FACTORY``'s module
    imported and its factory found callable (not called); with ``load=False`` (when the config is made) a
    ``.py`` file is only found, not run. Returns the factory of a ``MODULE:FACTORY`` name loaded."""
    from ... import models

    if not isinstance(name, str) or not name.strip():
        raise FedleakError(f"model must be a zoo name or MODULE:FACTORY, got {name!r}")
    if weights:
        path = Path(weights)
        if not path.is_file():
            raise FedleakError(f"--weights {weights}: no such file")
        if path.suffix == ".safetensors":
            from ...config.loaders import safetensors_header

            safetensors_header(path, f"--weights {weights}")
    if not is_factory_path(name):
        models.check(name)
        return None
    module_name, _, attr = name.rpartition(":")
    if not module_name or not attr:
        raise FedleakError(f"model {name!r}: expected MODULE:FACTORY, e.g. mymodels:build")
    if not load and (module_name.endswith(".py") or os.sep in module_name or "/" in module_name):
        _find(module_name)  # a file of the user's: found, not run, until the model is built
        return None
    module = _import(module_name)  # an importable module: imported once (cached), its factory found
    factory = getattr(module, attr, None)
    if factory is None:
        raise FedleakError(f"model module {module_name!r} has no attribute {attr!r}")
    if not callable(factory) or isinstance(factory, type) and not issubclass(factory, nn.Module):
        raise FedleakError(f"model factory {name!r} is not a function or nn.Module class")
    return factory


def build_model(name: str, spec: DataSpec, seed: int = 0) -> nn.Module:
    """The model named by ``name`` (zoo name or ``MODULE:FACTORY``) for ``spec``, on CPU, float32."""
    from ... import models

    factory = check_model(name)
    if factory is None:
        return models.build(name, spec, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(int(seed))
        try:
            model = factory(spec) if _takes_argument(factory) else factory()
        except Exception as exc:
            raise FedleakError(f"model factory {name!r} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise FedleakError(f"model factory {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    check_usable(model, name)  # before .to(): a meta-device tensor cannot be copied (NotImplementedError)
    return model.to(device="cpu", dtype=torch.float32).train()


def read_weights(path) -> dict:
    """A state dict from ``.safetensors`` or (``weights_only=True``) ``.pt``/``.pth``."""
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"weights file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from ...config.loaders import read_safetensors

        return read_safetensors(path, f"weights file {path}")
    if suffix in (".pt", ".pth"):
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # weights_only refuses anything but tensors and plain containers
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FedleakError(f"weights file {path} cannot be read with weights_only=True: {first}") from None
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise FedleakError(f"weights file {path} does not hold a state dict of tensors")
        return state
    raise FedleakError(f"weights file {path}: unsupported format {suffix or '(none)'}; use .safetensors, .pt or .pth")


def load_weights(model: nn.Module, path) -> nn.Module:
    """Load ``path`` into ``model`` after checking every name and shape against the architecture."""
    state = read_weights(path)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if k in state and tuple(state[k].shape) != tuple(v.shape)]
    problems = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape (file vs model)", wrong)):
        if items:
            shown = ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
            problems.append(f"{label}: {shown}")
    if problems:
        raise FedleakError(f"weights {path} do not fit the model: " + "; ".join(problems))
    cast = [f"{k} ({str(state[k].dtype).replace('torch.', '')})" for k, v in expected.items()
            if v.is_floating_point() and not state[k].is_floating_point()]
    if cast:
        raise FedleakError(f"weights {path}: floating-point parameters stored with a non-floating dtype: "
                           f"{', '.join(cast[:5])}")
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise FedleakError(f"weights {path} hold NaN or inf in {', '.join(bad[:5])}")
    converted = {k: v.to(expected[k].dtype) for k, v in state.items()}
    over = [k for k, v in converted.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if over:  # finite in the file's dtype, infinite in the model's: name the tensor, not a symptom downstream
        k = over[0]
        raise FedleakError(f"weights {path}: {k} ({str(state[k].dtype).replace('torch.', '')}) holds values beyond "
                           f"the range of the model's {str(expected[k].dtype).replace('torch.', '')} "
                           f"(largest |value| {float(state[k].abs().max()):.3g})" +
                           (f"; also {', '.join(over[1:4])}" if len(over) > 1 else ""))
    model.load_state_dict(converted)
    return model


def check_usable(model: nn.Module, model_name: str) -> None:
    """A model with trainable parameters, all real numbers in memory (not on the meta device)."""
    params = list(model.parameters())
    if not params:
        raise FedleakError(f"model {model_name!r} has no parameters: there is no update to attack")
    meta = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.is_meta]
    if meta:
        raise FedleakError(f"model {model_name!r} has parameters on the meta device (no values), e.g. {meta[0]!r}; "
                           "build it with real tensors")
    odd = [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if odd:
        raise FedleakError(f"model {model_name!r} has non-floating-point parameters, e.g. {odd[0]!r}")


def check_fits(model: nn.Module, inputs: torch.Tensor, spec: DataSpec, model_name: str) -> None:
    """One forward pass on one input: the output must be (1, number of classes)."""
    check_usable(model, model_name)
    try:
        with torch.no_grad():
            was = model.training
            model.eval()
            out = model(inputs[:1])
            model.train(was)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FedleakError(f"data of shape {tuple(inputs.shape[1:])} does not fit model {model_name!r}: {first}") from None
    try:  # a forward that works on one input but breaks on a batch fails here, not inside an attack
        with torch.no_grad():
            was = model.training
            model.eval()
            batch_out = model(inputs[:2])
            model.train(was)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FedleakError(f"model {model_name!r} fails on a batch of {min(2, len(inputs))} inputs: "
                           f"{type(exc).__name__}: {first}") from None
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(torch.isfinite(out).all()):
        raise FedleakError(f"model {model_name!r} outputs NaN or inf on a client input")
    if not isinstance(batch_out, torch.Tensor) or batch_out.shape[:1] != inputs[:2].shape[:1]:
        raise FedleakError(f"model {model_name!r} maps a batch of {min(2, len(inputs))} inputs to "
                           f"{tuple(batch_out.shape) if isinstance(batch_out, torch.Tensor) else type(batch_out).__name__}")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, spec.num_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise FedleakError(f"model {model_name!r} maps one input of shape {tuple(inputs.shape[1:])} to {shape}, "
                           f"expected (1, {spec.num_classes}) logits for the {spec.num_classes} classes of {spec.name}")


def prepare_model(name: str, spec: DataSpec, *, seed: int = 0, weights: Optional[str] = None) -> nn.Module:
    """Build, load weights, return on CPU (the caller moves it to the device)."""
    model = build_model(name, spec, seed=seed)
    if weights:
        load_weights(model, weights)
    return model
