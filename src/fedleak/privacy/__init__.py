"""Empirical differential-privacy auditing of a federation (issue #29).

``fedleak.dp_audit`` (:func:`.audit.dp_audit`) runs DP-FedAvg with canary clients and reports, beside the
accountants' ε, the one-run lower bound (*proved* privacy loss) and the Gaussian estimate (*estimated*).
With ``level="example"`` (``fedleak dp-audit --level example --defense dp-sgd:clip=C,noise=σ``) it audits one
client's DP-SGD with Dirac gradient canaries instead (Steinke et al. §7), beside Opacus's RDP and PRV ε.
Modules: :mod:`.gdp` (closed forms), :mod:`.canaries`, :mod:`.federation`, :mod:`.one_run` (Steinke et al.;
Mahloujifar et al.), :mod:`.estimate` (Andrew et al.), :mod:`.accountants`, :mod:`.diagnose`, :mod:`.report`;
example level: :mod:`.sgd_canaries`, :mod:`.sgd_run`, :mod:`.sgd_diagnose`, :mod:`.sgd_audit`; Flower's LocalDpMod:
:mod:`.local_dp`; DP-LoRA updates (``level="lora"``, Opacus #820): :mod:`.lora_check`, :mod:`.lora_audit`; beside
the reconstruction audit at the same σ: :mod:`.beside`. The user's own Opacus training (``dp_audit(train=,
dataset=, model=)``, issue #42): :mod:`.opacus_audit`, faults planted in Opacus :mod:`.opacus_faults`; the one
verdict: :mod:`.verdict`, :mod:`.sgd_verdict`.
"""

from .audit import dp_audit
from .opacus_audit import audit_opacus

__all__ = ["audit_opacus", "dp_audit"]
