"""The audit's execute stage: clients → updates → attacks → scores, per threat model.

:mod:`.engine` runs the honest-but-curious server at one setting; :mod:`.malicious` the malicious server's
runs (shared imprint, LOKI) as configurations of one loop; :mod:`.steps` the steps both share and the
:class:`~.steps.RunContext` the stages pass along; :mod:`.tuning` the attacks' hyperparameter search on
surrogate clients; :mod:`.text` the text summaries; :mod:`.membership` membership of candidate documents;
:mod:`.progress` the progress display."""
