"""Attacks on tabular records: TabLeak and its ablations (:mod:`.tableak`), restarts batched into one tensor
(:mod:`.restarts`). The exact attacks (SPEAR, analytic-fc) apply to a tabular MLP's first linear + ReLU layer as
they are (:mod:`fedleak.attacks.spear`, :mod:`fedleak.attacks.analytic_fc`)."""

from . import tableak  # noqa: F401  (registers tableak, its ablations and the IG baseline)
from . import vgia  # noqa: F401  (registers vgia, the malicious server's certified slabs)
