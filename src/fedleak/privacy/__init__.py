"""Empirical differential-privacy auditing of a federation (issue #29).

``fedleak.dp_audit`` (:func:`.audit.dp_audit`) runs DP-FedAvg with canary clients and reports, beside the
accountants' ε, the one-run lower bound (*proved* privacy loss) and the Gaussian estimate (*estimated*).
Modules: :mod:`.gdp` (closed forms), :mod:`.canaries`, :mod:`.federation`, :mod:`.one_run` (Steinke et al.;
Mahloujifar et al.), :mod:`.estimate` (Andrew et al.), :mod:`.accountants`, :mod:`.diagnose`, :mod:`.report`.
"""

from .audit import dp_audit

__all__ = ["dp_audit"]
