"""One finding of the client-side inspector (:mod:`.inspect`, :mod:`.inspect_fishing`, :mod:`.dsnr`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Finding:
    """One signature in one layer: which layer, which signature, how sure (0–1), what was seen."""

    layer: str
    signature: str
    confidence: float
    detail: str
    evidence: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"{self.layer}: {self.signature} (confidence {self.confidence:.3f}) — {self.detail}"
