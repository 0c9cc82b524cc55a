"""The one overall verdict line of an audit (console, report, Flower dashboard):

    honest: high · malicious: not run · membership: … · DP: claim holds at 100 canaries

Each part is the verdict the audit already decided — nothing here re-judges — with its evidence: the honest and
malicious servers' ``verdict`` / ``evidence`` (:mod:`.verdict`), membership where it was measured (the honest
server's ``membership`` field, or the result's), and the DP claim where one was checked (a result's ``dp_verdict``:
``violated`` / ``not in force`` / ``consistent``, with its evidence) or only accounted (ε, not audited). A part that
did not run says so; the line never says "safe".
"""

from __future__ import annotations

from typing import Optional

HONEST, MALICIOUS = "honest-but-curious", "malicious"
SEPARATOR = " · "


def _membership(result: dict, honest: dict) -> Optional[dict]:
    found = honest.get("membership") if isinstance(honest.get("membership"), dict) else result.get("membership")
    if not isinstance(found, dict):
        return None
    level = found.get("verdict") or found.get("level")
    if level is None and found.get("auc") is not None:
        level = f"AUC {float(found['auc']):.2f}"
    if level is None:
        return None
    evidence = found.get("evidence") or found.get("sentence") or ""
    return {"name": "membership", "level": str(level), "evidence": str(evidence)}


def _dp(result: dict) -> dict:
    claim = result.get("dp_verdict")
    if isinstance(claim, dict) and claim.get("verdict"):
        return {"name": "DP", "level": str(claim.get("short") or claim["verdict"]),
                "evidence": str(claim.get("evidence") or "")}
    eps = [e.get("epsilon_rdp") for e in (result.get("epsilon") or {}).values()
           if isinstance(e, dict) and e.get("epsilon_rdp") is not None]
    if eps:
        return {"name": "DP", "level": f"ε = {max(eps):.2f} (accountant, not audited)",
                "evidence": "the accountant's ε of the configured DP-SGD; no canary audit ran"}
    return {"name": "DP", "level": "none configured", "evidence": "no DP mechanism in the audited configuration"}


def overall(result: dict) -> dict:
    """``{"line": "honest: … · malicious: … · …", "parts": [{name, level, evidence}]}`` of an audit result."""
    tms = result.get("threat_models") or {}
    parts = []
    for key, name in ((HONEST, "honest"), (MALICIOUS, "malicious")):
        tm = tms.get(key)
        if not isinstance(tm, dict) or tm.get("verdict") in (None, "not run"):
            reason = (tm or {}).get("not_run_reason") or "no attack of this threat model ran"
            parts.append({"name": name, "level": "not run", "evidence": reason})
            continue
        from .verdict import evidence_sentence

        evidence = tm.get("evidence_text") or evidence_sentence(tm)
        parts.append({"name": name, "level": str(tm["verdict"]), "evidence": evidence})
    member = _membership(result, tms.get(HONEST) or {})
    if member is not None:
        parts.append(member)
    parts.append(_dp(result))
    return {"line": SEPARATOR.join(f"{p['name']}: {p['level']}" for p in parts), "parts": parts}


def html(result: dict) -> str:
    """The line as an HTML block, each part with its evidence beneath (report and dashboard)."""
    import html as _html

    info = result.get("overall") or overall(result)
    items = "".join(f"<li><b>{_html.escape(p['name'])}: {_html.escape(p['level'])}</b> — "
                    f"{_html.escape(p['evidence'])}</li>" for p in info["parts"])
    return (f'<div class="overall" id="overall"><p class="overall-line"><b>{_html.escape(info["line"])}</b></p>'
            f"<ul>{items}</ul></div>")
