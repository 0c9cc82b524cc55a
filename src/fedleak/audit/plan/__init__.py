"""The audit's plan stage: what the user asked (:mod:`.config`, :mod:`.arguments`, :mod:`.flowertune`), the
model it names (:mod:`.model_loading`, :mod:`.text`), the settings to run (:mod:`.points`, :mod:`.combinations`),
the threat models and the attacks that fit them (:mod:`.threats`), and the embedded default (:mod:`.default`)."""
