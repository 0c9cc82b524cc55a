"""Reading configs: YAML files (safe loader, duplicate keys refused, one-line errors) and the bundled presets."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from ..errors import FedleakError, unknown_choice
from .experiment_model import parse_config
from .experiment import MAX_CONFIG_BYTES, ExperimentConfig


#: the deepest flow nesting ([ ] / { }) read from YAML (PyYAML recurses per level)
MAX_YAML_DEPTH = 100


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden by own keys
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_yaml(text: bytes, source: str):
    """YAML bytes → Python objects; non-UTF-8, malformed YAML and duplicate keys → one line with the line number."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = text[:exc.start].count(b"\n") + 1
        raise FedleakError(f"{source} is not UTF-8 text (line {line}, byte {exc.start}); is it a YAML file?") from None
    from .json_safe import json_depth

    if json_depth(text) > MAX_YAML_DEPTH:  # flow collections nested this deep only come from a hostile file
        raise FedleakError(f"{source} nests more than {MAX_YAML_DEPTH} levels of [ ] or {{ }}")
    try:
        return yaml.load(decoded, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
        if mark is None and hasattr(exc, "position"):  # reader errors (control characters)
            line = decoded[:exc.position].count("\n") + 1
        else:
            line = mark.line + 1 if mark is not None else "?"
        where = ""
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark is not None and context_mark.line + 1 != line:
            where = f" ({' '.join(str(context).split())} started on line {context_mark.line + 1})"
        problem = " ".join(str(problem).split())
        raise FedleakError(f"{source} is not valid YAML: line {line}: {problem}{where}") from None
    except RecursionError:
        raise FedleakError(f"{source} is nested too deeply") from None


def load_config(path) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"missing config file {path}")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise FedleakError(f"{path} is {size} bytes; an experiment config is at most {MAX_CONFIG_BYTES}")
        text = path.read_bytes()
    except OSError as exc:
        raise FedleakError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    return parse_config(parse_yaml(text, str(path)), str(path))


def presets() -> dict[str, str]:
    """Preset names → descriptions (files in ``fedleak/presets``)."""
    out = {}
    for entry in sorted(resources.files("fedleak.presets").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            raw = yaml.safe_load(entry.read_text()) or {}
            out[entry.name[:-5]] = str(raw.get("description", ""))
    return out


def load_preset(name: str) -> ExperimentConfig:
    available = presets()
    if name not in available:
        raise unknown_choice("preset", name, available)
    entry = resources.files("fedleak.presets").joinpath(f"{name}.yaml")
    return parse_config(parse_yaml(entry.read_bytes(), f"preset {name}"), f"preset {name}")
