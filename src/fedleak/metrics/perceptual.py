"""LPIPS (Zhang et al. 2018, "The Unreasonable Effectiveness of Deep Features as a Perceptual
Metric", CVPR), AlexNet variant v0.1, written in plain torch and loaded from ONE local file.

Nothing is ever downloaded. The weights come from a safetensors file given by argument or by the
environment variable ``FEDLEAK_LPIPS_WEIGHTS``; without one, :func:`lpips` returns ``None`` and a
one-line reason instead of failing. The file holds the AlexNet feature stack (torchvision names
``features.{0,3,6,8,10}.{weight,bias}``) and the five learned linear heads (``lin{0..4}.weight``,
shape ``(1, C, 1, 1)``); :data:`LPIPS_WEIGHT_SHAPES` lists them. Keys as the ``lpips`` package
stores them (``net.slice1.0.weight``, ``lin0.model.1.weight``) and a full torchvision AlexNet state
dict (``classifier.*`` ignored) are accepted too. :func:`convert_lpips_weights` builds the file
from locally available ``.pth`` files (torchvision's ``alexnet-owt-7be5be79.pth`` and the
``lpips`` package's ``weights/v0.1/alex.pth``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Optional

import torch
import torch.nn.functional as F

from ..errors import FedleakError

ENV_VAR = "FEDLEAK_LPIPS_WEIGHTS"

NOT_FOUND = (
    f"LPIPS weights not found; set {ENV_VAR} to a safetensors file with AlexNet+lin weights"
)

# (torchvision index, in channels, out channels, kernel, stride, padding) of AlexNet's convs.
_CONVS = (
    (0, 3, 64, 11, 4, 2),
    (3, 64, 192, 5, 1, 2),
    (6, 192, 384, 3, 1, 1),
    (8, 384, 256, 3, 1, 1),
    (10, 256, 256, 3, 1, 1),
)

LPIPS_WEIGHT_SHAPES: dict[str, tuple[int, ...]] = {}
for _k, (_idx, _cin, _cout, _ks, _s, _p) in enumerate(_CONVS):
    LPIPS_WEIGHT_SHAPES[f"features.{_idx}.weight"] = (_cout, _cin, _ks, _ks)
    LPIPS_WEIGHT_SHAPES[f"features.{_idx}.bias"] = (_cout,)
    LPIPS_WEIGHT_SHAPES[f"lin{_k}.weight"] = (1, _cout, 1, 1)

# LPIPS v0.1 input scaling (applied to images in [-1, 1]).
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)

#: Smallest side for which AlexNet's stack still yields non-empty features; smaller images
#: (FEMNIST's 28×28) are upsampled bilinearly to it.
MIN_SIDE = 32


def _canonical_key(key: str) -> Optional[str]:
    key = key.removeprefix("module.")
    m = re.fullmatch(r"(?:net\.)?slice\d\.(\d+)\.(weight|bias)", key)
    if m:
        return f"features.{m.group(1)}.{m.group(2)}"
    m = re.fullmatch(r"(?:.*\.)?features\.(\d+)\.(weight|bias)", key)
    if m:
        return f"features.{m.group(1)}.{m.group(2)}"
    m = re.fullmatch(r"(?:.*\.)?lin(\d)\.(?:model\.1\.)?weight", key)
    if m:
        return f"lin{m.group(1)}.weight"
    return None


def _canonical_state(tensors: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Rename to the canonical keys, keep only what LPIPS needs, check that all shapes fit."""
    state: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        name = _canonical_key(key)
        if name in LPIPS_WEIGHT_SHAPES:
            state[name] = value
    missing = sorted(set(LPIPS_WEIGHT_SHAPES) - set(state))
    if missing:
        raise FedleakError(f"{source} lacks LPIPS weight(s) {', '.join(missing)}")
    for name, shape in LPIPS_WEIGHT_SHAPES.items():
        if tuple(state[name].shape) != shape:
            raise FedleakError(
                f"{source}: {name} has shape {tuple(state[name].shape)}, expected {shape}"
            )
        if not bool(torch.isfinite(state[name]).all()):
            raise FedleakError(f"{source}: {name} holds NaN or infinite values")
    return {k: v.detach().float().contiguous() for k, v in state.items()}


class LPIPS:
    """LPIPS-Alex distance. Call with two pixel batches in ``[0, 1]``, ``(N, 1 or 3, H, W)``.

    Per image: scale to ``[-1, 1]``, apply the v0.1 shift/scale, take the five ReLU outputs of the
    AlexNet stack, unit-normalize each over channels, square the difference, weight channels with
    the linear heads, average over space and sum over layers. Grayscale is repeated to 3 channels;
    sides under :data:`MIN_SIDE` are upsampled bilinearly first.
    """

    def __init__(self, state: dict[str, torch.Tensor]):
        self.state = _canonical_state(state, "LPIPS state")
        self._moved: dict[tuple, dict[str, torch.Tensor]] = {}

    def _weights(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        key = (like.device, like.dtype)
        if key not in self._moved:
            self._moved[key] = {k: v.to(device=like.device, dtype=like.dtype) for k, v in self.state.items()}
        return self._moved[key]

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        w = self._weights(x)
        shift = torch.as_tensor(_SHIFT, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        scale = torch.as_tensor(_SCALE, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        h = ((2 * x - 1) - shift) / scale
        taps = []
        for k, (idx, _cin, _cout, _ks, stride, pad) in enumerate(_CONVS):
            if k in (1, 2):  # max pools before conv2 and conv3
                h = F.max_pool2d(h, kernel_size=3, stride=2)
            h = F.relu(F.conv2d(h, w[f"features.{idx}.weight"], w[f"features.{idx}.bias"], stride=stride, padding=pad))
            taps.append(h)
        return taps

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.shape != b.shape or a.dim() != 4:
            raise FedleakError(f"LPIPS needs two (N, C, H, W) batches of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
        if a.shape[1] not in (1, 3):
            raise FedleakError(f"LPIPS needs 1 or 3 channels, got {a.shape[1]}")
        dtype = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
        x = torch.cat([a, b.to(a.device)]).to(dtype)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        h, w = x.shape[-2:]
        if min(h, w) < MIN_SIDE:
            f = MIN_SIDE / min(h, w)
            size = (max(MIN_SIDE, round(h * f)), max(MIN_SIDE, round(w * f)))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        weights = self._weights(x)
        n = a.shape[0]
        total = x.new_zeros(n)
        for k, f_all in enumerate(self.features(x)):
            f_all = f_all / (f_all.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10)
            diff = (f_all[:n] - f_all[n:]).pow(2)
            total = total + F.conv2d(diff, weights[f"lin{k}.weight"]).mean(dim=(1, 2, 3))
        return total


_CACHE: dict[tuple, LPIPS] = {}


def _resolve(weights) -> tuple[Optional[Path], Optional[str]]:
    if weights is None or weights is True:
        weights = os.environ.get(ENV_VAR) or None
        if weights is None:
            return None, NOT_FOUND
    path = Path(os.fspath(weights)).expanduser()
    if not path.is_file():
        return None, f"LPIPS weights not found at {path}; set {ENV_VAR} to a safetensors file with AlexNet+lin weights"
    return path, None


def load_lpips(weights=None) -> tuple[Optional[LPIPS], Optional[str]]:
    """The LPIPS model from ``weights`` (a path; ``None``/``True``: ``$FEDLEAK_LPIPS_WEIGHTS``).

    Returns ``(model, None)``, or ``(None, reason)`` when the file is missing or unusable — never
    raises for that, never downloads. Models are cached per file (path, size, mtime).
    """
    path, reason = _resolve(weights)
    if path is None:
        return None, reason
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _CACHE:
            from safetensors.torch import load_file

            _CACHE[key] = LPIPS(_canonical_state(load_file(str(path)), str(path)))
        return _CACHE[key], None
    except FedleakError as exc:
        return None, f"LPIPS weights unusable: {exc}"
    except Exception as exc:  # corrupt file, unreadable, not safetensors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"LPIPS weights at {path} unusable ({type(exc).__name__}: {first})"


def lpips(a: torch.Tensor, b: torch.Tensor, weights=None,
          batch_size: int = 64) -> tuple[Optional[torch.Tensor], Optional[str]]:
    """LPIPS distance per image between pixel batches ``a`` and ``b`` in ``[0, 1]``.

    Returns ``(distances (N,), None)``, or ``(None, reason)`` with a one-line reason when no usable
    weights file is found (see :func:`load_lpips`) or the images are not 1- or 3-channel. 0 for identical images. Runs without autograd,
    ``batch_size`` pairs at a time.
    """
    model, reason = load_lpips(weights)
    if model is None:
        return None, reason
    single = a.dim() == 3
    if single:
        a, b = a.unsqueeze(0), b.unsqueeze(0)
    if a.shape != b.shape or a.dim() != 4:
        raise FedleakError(f"lpips needs two image batches of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] not in (1, 3):
        return None, f"LPIPS needs 1 or 3 channels, got {a.shape[1]}"
    step = max(1, int(batch_size))
    with torch.no_grad():
        out = torch.cat([model(a[i:i + step].detach(), b[i:i + step].detach()) for i in range(0, a.shape[0], step)])
    return (out[0] if single else out), None


def convert_lpips_weights(sources: Iterable, out) -> Path:
    """Merge local weight files (``.pth``/``.pt`` state dicts or ``.safetensors``) into the one
    safetensors file LPIPS loads, e.g. ``convert_lpips_weights(["alexnet-owt-7be5be79.pth",
    "alex.pth"], "lpips_alex.safetensors")``. Never downloads; raises :class:`FedleakError` if a
    weight is missing or misshapen.

    This is the only place fedleak reads a torch pickle, and only because the published AlexNet
    and LPIPS weights exist only as ``.pth`` files. It reads them with torch's
    ``weights_only=True`` loader: the restricted unpickler, which rebuilds tensors and plain
    containers and refuses every other global, so a crafted file cannot run code (a refused file
    is a :class:`FedleakError`). It runs once, on files the user names; LPIPS itself (and
    everything else fedleak loads) reads safetensors and JSON only.
    """
    from safetensors.torch import load_file, save_file

    merged: dict[str, torch.Tensor] = {}
    names = []
    for src in sources:
        src = Path(os.fspath(src)).expanduser()
        names.append(str(src))
        if not src.is_file():
            raise FedleakError(f"missing weights file {src}")
        try:
            if src.suffix == ".safetensors":
                tensors = load_file(str(src))
            else:
                # weights_only=True: tensors and containers only, never arbitrary objects (see docstring)
                tensors = torch.load(str(src), map_location="cpu", weights_only=True)
                if isinstance(tensors, dict) and "state_dict" in tensors:
                    tensors = tensors["state_dict"]
        except Exception as exc:  # refused pickles land here too (UnpicklingError)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FedleakError(f"cannot read weights file {src}: {first}") from None
        if not isinstance(tensors, dict):
            raise FedleakError(f"{src} does not hold a state dict")
        merged.update({k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)})
    state = _canonical_state(merged, " + ".join(names) or "no sources")
    out = Path(os.fspath(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out))
    return out
