"""The one DP verdict of a client-level audit (``fedleak dp-audit``, :mod:`.audit`; :mod:`.verdict` states it),
for the simulated DP-FedAvg federation (:mod:`.federation`: Flower's central DP, fixed or adaptive clipping, or
``LocalDpMod`` on every node).

The federation adds Gaussian noise to clipped updates, every client every round: T releases compose to exactly
√T/σ-GDP (Dong, Roth, Su Cor. 3.3; adaptive clipping with its clipped-count release, Andrew et al. 2021 Thm. 1), so
the claim is tested as μ-GDP and the Gaussian f-DP bound proves (:data:`GAUSSIAN_CLIENT`). Beside the claim test,
pre-registered tests (the 95 % bound's guesses, the per-node tests, the noise-scale χ² test) and the smallest noise
fault the budget detects (:func:`.verdict.shift_power` with
:meth:`fedleak.integrations.flower.canary_replies.NoiseProbe.typical_p`: computed from the claim, never from the
run's canaries). The example-level counterpart is :mod:`.sgd_verdict`.
"""

from __future__ import annotations

GAUSSIAN_CLIENT = ("Gaussian noise on clipped updates, every client every round: T releases (adaptive clipping: "
                   "with its clipped-count release, Andrew et al. 2021 Thm. 1) compose to exactly √T/σ-GDP (Dong, Roth, "
                   "Su Cor. 3.3)")


def client_verdict(result: dict, fed, mu_claimed: float, local, setting) -> dict:
    """The one DP verdict of the client-level audit (:mod:`.verdict`). The simulated federation adds Gaussian noise
    to clipped updates (fixed or adaptive clipping, central or LocalDpMod): Gaussian by construction. A user's own
    aggregator (``CanaryAudit``) is not, and takes the assumption-free bound (``gaussian=None``)."""
    from .diagnose import claim_guesses
    from .one_run import Guesses, gdp_p_value, guess, steinke_p_value
    from .verdict import dp_verdict, shift_power, z_test

    acc, check, threat, delta = result["epsilon_accountant"], result["misconfiguration"], result["threat"], result["delta"]
    k, b = result["setting"]["clients"], result["lower_bounds"][threat]
    node_p = min([1.0] + [k * min(n["p_value"] for n in check["clients"])] * bool(check["clients"])
                 + [2 * k * min(n["p_value"] for n in check["reply_test"])] * bool(check["reply_test"]))
    tests = {  # pre-registered beside the claim test; a rejection here is never reported consistent (verdict.py)
        "the 95 % bound's guesses against the claimed μ": gdp_p_value(mu_claimed, Guesses(
            b["canaries"], b["guesses"], b["correct"], b["guess_in"], b["guess_out"])),
        "the per-node tests (aggregates ×K, replies ×2K, then ×2)": min(1.0, 2 * node_p),
        "the noise-scale χ² test of the released aggregates": float(check["noise_test"].get("p_value", 1.0))}
    claimed = acc.get("opacus_prv") or acc["gdp_exact"]
    name = "Opacus PRV" if acc.get("opacus_prv") else "exact GDP"
    gaussian = GAUSSIAN_CLIENT
    scores, included = fed.scores[threat], fed.included

    def p_of(s, inc):
        if gaussian:
            return gdp_p_value(mu_claimed, claim_guesses(s, inc, mu_claimed)[0])
        g = guess(s, inc)
        return steinke_p_value(g.m, g.r, g.v, claimed, delta)

    arithmetic = ()
    if local is not None:
        from .local_dp import sensitivity_finding

        arithmetic = ("LocalDpMod's sensitivity is below its clipping norm (arithmetic, below)",) \
            if sensitivity_finding(local) else ()
    from ..integrations.flower.canary_replies import NoiseProbe

    # the budget's power: a noise fault f is found when the claim test or the noise-scale test (typical run) rejects
    noise, power = check["noise_test"], shift_power(int(included.sum()), int((~included).sum()), mu_claimed, p_of)
    return dp_verdict(epsilon_claimed=claimed, claim_name=f"{name}, σ = {setting.noise:g}, {result['rounds']} rounds",
                      bound=result["lower_bounds"][threat], gaussian=gaussian,
                      claim_test={"p_value": check["claim_test"]["p_value"], "hypothesis": f"μ = {mu_claimed:.2f}-GDP"},
                      claim_test_rigorous=gaussian is not None, estimate_epsilon=result["epsilon_estimate"],
                      estimate_interval=result["estimates"][threat].get("epsilon_interval"),
                      z=z_test(scores, included, mu_claimed),
                      estimated_findings=[f for f in check["findings"] if f.startswith("Estimated")],
                      alpha=check["alpha"], budget=f"{result['canaries']} canary clients, {result['rounds']} rounds",
                      fault_test=lambda f: min(power(f), NoiseProbe.typical_p(f, noise.get("dof", 0),
                                                                             noise.get("margin", 0.9))),
                      arithmetic=arithmetic, tests=tests)
