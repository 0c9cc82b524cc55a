"""The DP audit beside the reconstruction audit at the same σ (issue #29 item 3; opacus #395 "attack quality as a
function of ε").

``fedleak dp-audit --leakage-metrics PATH`` reads a ``metrics.json`` that ``fedleak audit --defense SPEC`` wrote and
checks that its defense is the audited claim (same kind, σ and C; else exit 2 naming the option, before ``--out``
is made); ``--with-attacks`` runs a short ``fedleak audit`` itself (``--quick``, FedSGD, one image per client, two
clients, honest-but-curious only: tens of seconds on 2 cores) with the same model, data, seed and defense and
writes it under ``out/leakage/``. The report then states, in the verdict vocabulary, what the attacks recover at
that σ beside the accountant's ε, the one-run lower bound (*proved*: Steinke, Nasr, Jagielski NeurIPS '23 §5;
Mahloujifar et al. ICML '25) and the Gaussian estimate (*estimated*: Andrew et al. ICLR '24 §3), and the gaps
between them. An attack that finds nothing proves nothing (a bound from below, like the DP audit's), and under
``flower-central-dp`` the honest-but-curious server sees each clipped update *before* its own noise, so σ does not
act against it: the report says so rather than comparing unlike things.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..errors import FedleakError

OPTION = "--leakage-metrics"


def defense_key(specs) -> tuple:
    """(kind, σ, C) of a defense spec list as :func:`fedleak.audit.plan.config.parse_defenses` reads it."""
    from ..audit.plan.config import parse_defenses

    parsed, _, _ = parse_defenses([specs] if isinstance(specs, str) else list(specs or ()))
    params = getattr(parsed, "params", None)
    if params is not None:
        return (parsed.kind, float(params.get("noise", math.nan)), float(params.get("clip", math.nan)))
    return (getattr(parsed, "kind", None), float(getattr(parsed, "scale", math.nan)),
            float(getattr(parsed, "clip", math.nan) or math.nan))


def read_leakage(path, defense) -> dict:
    """The leakage audit's ``metrics.json`` at ``path``, checked to be ``fedleak audit``'s and at the claim's
    defense; a one-line :class:`FedleakError` naming ``--leakage-metrics`` otherwise."""
    from ..config.json_safe import read_json_file

    try:  # the boundary's JSON reader: size and depth bounded, NaN/Infinity refused
        metrics = read_json_file(path, obj=False)
    except FedleakError as exc:
        raise FedleakError(f"{OPTION} {path}: not a readable metrics.json ({exc})") from None
    if not isinstance(metrics, dict) or not str(metrics.get("format", "")).startswith("fedleak.audit/"):
        raise FedleakError(f"{OPTION} {path}: not a fedleak audit metrics.json (no format fedleak.audit/…)")
    from ..config.boundary import validate

    validate(_metrics_model(), metrics, where=f"{OPTION} {path}")  # the shape read below, before it is read
    specs = (metrics.get("config") or {}).get("defense") or []
    try:
        theirs = defense_key(specs) if specs else None
    except FedleakError:
        theirs = None
    ours = defense_key(defense)
    if theirs is None or theirs[0] != ours[0] or not all(math.isclose(a, b, rel_tol=1e-9) for a, b in
                                                         zip(theirs[1:], ours[1:])):
        raise FedleakError(f"{OPTION} {path}: its audit ran --defense {', '.join(map(str, specs)) or 'none'}, not the "
                           f"audited {', '.join([defense] if isinstance(defense, str) else defense)} (σ and clip must "
                           "match)")
    if metrics.get("sweep"):
        raise FedleakError(f"{OPTION} {path}: a sweep's metrics.json mixes settings; give an audit at one setting")
    return summarize(metrics, str(Path(path)))


def _metrics_model():
    """The part of ``metrics.json`` this module reads, typed strictly (other keys pass): a file of the right format
    and the wrong shape is one line naming the key, not an ``AttributeError`` later."""
    from typing import Any, Optional, Union

    from pydantic import ConfigDict, create_model

    loose = ConfigDict(strict=True, extra="allow")
    config = create_model("LeakageConfig", __config__=loose, defense=(Optional[Union[str, list[str]]], None))
    return create_model("LeakageMetrics", __config__=loose, format=(str, ...), config=(Optional[config], None),
                        threat_models=(Optional[dict[str, dict[str, Any]]], None),
                        epsilon=(Optional[dict[str, Any]], None), environment=(Optional[dict[str, Any]], None),
                        quick=(Optional[bool], None), modality=(Optional[str], None))


def summarize(metrics: dict, source: str) -> dict:
    """What the reconstruction audit found, per threat model, with its own ε."""
    threats = {}
    for name, t in (metrics.get("threat_models") or {}).items():
        threats[name] = {k: t.get(k) for k in ("verdict", "evidence", "rec_percent", "psnr", "strongest")}
    eps = {}
    for scenario, e in (metrics.get("epsilon") or {}).items():
        if isinstance(e, dict):
            eps[scenario] = {k: e.get(k) for k in ("epsilon_rdp", "epsilon_prv", "epsilon", "delta", "steps", "rounds")
                             if k in e}
    return {"source": source, "defense": (metrics.get("config") or {}).get("defense"), "quick": metrics.get("quick"),
            "modality": metrics.get("modality"), "threat_models": threats, "epsilon": eps,
            "environment": {k: (metrics.get("environment") or {}).get(k) for k in ("threads", "device")}}


def run_leakage(defense, *, model: str, data: str, data_root, seed: int, model_seed: int, out_dir: Optional[Path]) -> dict:
    """A short reconstruction audit at the claim's defense (``fedleak audit --quick``, FedSGD, 1 image, 2 clients,
    no malicious server); its report in ``out_dir/leakage`` (a temporary folder without ``out_dir``)."""
    import tempfile

    from ..audit.run import audit

    specs = [defense] if isinstance(defense, str) else list(defense)
    with tempfile.TemporaryDirectory() as tmp:
        where = (out_dir / "leakage") if out_dir is not None else Path(tmp) / "leakage"
        metrics = audit(model=model, data=data, data_root=data_root, algorithm="fedsgd", samples=1, clients=2,
                        defense=specs, quick=True, malicious=False, seed=seed, model_seed=model_seed, out=str(where),
                        progress=None, log=lambda *_: None)
        return summarize(metrics, str(where / "metrics.json") if out_dir is not None else "(not kept: no --out)")


def _f(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.2f}"


def gap_lines(result: dict, leak: dict) -> list[str]:
    """The sentences that put the DP audit and the reconstruction audit side by side, with the gaps."""
    acc = result["epsilon_accountant"]
    claim = next((acc[k] for k in ("opacus_prv", "gdp_exact", "opacus_rdp") if acc.get(k) is not None), None)
    low, est = result.get("epsilon_lower"), result.get("epsilon_estimate")
    lines = []
    if claim:
        gap = f"At σ = {result['setting']['noise']:g}: the accountant claims ε = {_f(claim)}; proved ε ≥ {_f(low)}"
        if low is not None and math.isfinite(low):
            gap += f" ({low / claim:.0%} of it; the gap {_f(claim - low)} is loss not shown, not privacy shown kept)"
        if est is not None and math.isfinite(est) and est < 1000:
            gap += f"; estimated ε ≈ {_f(est)} ({est / claim:.0%} of it)"
        lines.append(gap + ".")
    hbc = leak["threat_models"].get("honest-but-curious") or next(iter(leak["threat_models"].values()), {})
    found = (f"the strongest attack ({hbc.get('strongest')}) reconstructs {_f(hbc.get('rec_percent'))} % of a client's "
             f"{'texts' if leak.get('modality') == 'text' else 'images'} recognizably (PSNR {_f(hbc.get('psnr'))} dB)")
    word = {"proved": "proved", "estimated": "estimated", "not-found": "not found"}.get(hbc.get("evidence"), hbc.get("evidence"))
    lines.append(f"The reconstruction audit at the same σ ({leak['source']}, --defense {', '.join(leak['defense'] or [])}"
                 f"{', quick' if leak.get('quick') else ''}): verdict {hbc.get('verdict')} (evidence {word}): {found}."
                 + (" Nothing recovered proves nothing: like the lower bound, it shows loss or nothing."
                    if not hbc.get("rec_percent") else ""))
    for scenario, e in leak.get("epsilon", {}).items():
        own = e.get("epsilon_prv", e.get("epsilon_rdp", e.get("epsilon")))
        if own is not None:
            lines.append(f"That audit's own accountant ({scenario}: {e.get('steps', e.get('rounds', '?'))} step(s)) "
                         f"gives ε = {_f(own)} at the same σ: its attacks face that release, not this audit's "
                         f"{result.get('steps', result.get('rounds'))}-step one.")
    if result["setting"].get("defense", "").startswith("flower-central-dp"):
        lines.append("Under flower-central-dp the server adds the noise after it sees each clipped update: against the "
                     "honest-but-curious server only the clipping acts, so the attacks' result does not move with σ "
                     "while the accountant's and the audit's ε do (the noise protects against whoever sees the model).")
    return lines
