"""The audit's judge stage: the verdict (one :func:`~.verdict.level` for images and text) and the evidence
behind it, decided from what ran (:mod:`.verdict`)."""
