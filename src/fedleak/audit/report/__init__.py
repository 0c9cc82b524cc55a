"""The audit's report stage: ``report.html`` (verdicts first), the printed table, "what to change", the plots.

:mod:`.page` builds the page and the tables for both modalities; :mod:`.text` holds what only a text result
shows (sequences token by token, ROUGE plots); :mod:`.figures` draws the plots.
"""

from .page import (COLUMNS, QUICK_CAVEAT, THREAT_TITLES, epsilon_text, imprint_sentence, make_plots, printed_table,
                   rows, save_plots, shortened, state_malicious, verdict_colour, verdict_label, verdict_sentence,
                   what_to_change, write_report)

__all__ = ["COLUMNS", "QUICK_CAVEAT", "THREAT_TITLES", "epsilon_text", "imprint_sentence", "make_plots",
           "printed_table", "rows", "save_plots", "shortened", "state_malicious", "verdict_colour", "verdict_label",
           "verdict_sentence", "what_to_change", "write_report"]
