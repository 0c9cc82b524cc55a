"""The one set of numeric bounds every door checks (plain numbers: importing them loads neither torch nor pydantic).

Values that enter — CLI flags, YAML, attack options, specs, the Python API, value types — are refused outside
these before memory is spent. :mod:`fedleak.types.limits` (the value types' sizes) and
:mod:`fedleak.config.boundary` (the strict settings models) re-export them; the command line's argument types
(:mod:`fedleak.config.cli_args`) read them here, so that ``fedleak --help`` starts in a fraction of a second.
"""

#: sizes of one input and of a client (the value types' own bounds, checked where a Protocol or ClientData is built)
MAX_SIDE = 16384  # channels, height or width of one input
MAX_INPUT_NUMEL = 2 ** 28
MAX_CLASSES = 1_000_000
MAX_EPOCHS = 100_000
MAX_SAMPLES = 1_000_000  # samples of one client, a batch size (the config boundary uses this one too)

#: bounds of numbers that carry none of their own (a value beyond them overflows later arithmetic)
MAX_INT = 2 ** 31 - 1
MAX_FLOAT = 1e12
#: seeds (torch's generator takes 64 bits; a seed of the CLI, YAML or an attack option fits 32)
MAX_SEED = 2 ** 32 - 1
#: clients of one run, rounds of a federation
MAX_CLIENTS = 100_000
MAX_ROUNDS = 100_000
#: the largest learning rate, defense strength or other positive rate (beyond it float32 updates overflow)
MAX_RATE = 1e6
