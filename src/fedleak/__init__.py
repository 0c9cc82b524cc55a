"""fedleak: measure how much private data leaks from federated learning client updates.

The pipeline (``DESIGN.md``): data → client update → attack → reconstruction → metrics → report::

    spec, clients = fedleak.data.load("femnist", root=PATH, num_clients=10, samples_per_client=50)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    update = fedleak.client_update(model, clients[0], fedleak.Protocol("fedavg", epochs=10, batch_size=5))
    rec = fedleak.attacks.build("inverting-gradients").reconstruct(update, model, spec)
    scores = fedleak.metrics.evaluate(rec, clients[0], spec)

The deployment audit (``fedleak audit`` on the command line)::

    fedleak.audit(model="mymodels:build", data="cifar10", data_root=PATH, algorithm="fedavg",
                  defense="dp-sgd:clip=1,noise=1", sweep="defense=0,0.5,1,2", out="audit/")

``fedleak simulate`` / ``fedleak attack`` (save one client's update, attack a saved one)::

    fedleak.simulate_update("upd/", data="digits", algorithm="fedavg", epochs=1, batch_size=2, samples=4)
    fedleak.attack_update("upd/", "rec/", attack="dimitrov", options={"iterations": 20})

Is the claimed client-level DP in force (``fedleak dp-audit``; docs/dp-audit.md)::

    fedleak.dp_audit(defense="flower-central-dp:noise=3.4,clip=1,clients=10", rounds=10, canaries=1000, out="dp/")
    fedleak.dp_audit(defense="dp-sgd:clip=1,noise=1.1", level="example", batch_size=5, rounds=10, out="dp-sgd/")

The other commands (``fedleak inspect``, ``run``, ``report``, ``convert-gguf``; :mod:`fedleak.workflows`)::

    inspection, dsnr = fedleak.inspect_model_file("global.safetensors", model="lenet")
    summary = fedleak.run_experiment(preset="dimitrov-table1-femnist", out="runs/femnist", quick=True)
    page = fedleak.report_run("runs/femnist")
    info = fedleak.convert_gguf("smollm2", "models/smollm2")
"""

from .errors import FedleakError
from .lazy import attributes
from .version import __version__

# Everything else is imported on first use (PEP 562), so that `fedleak --help` and the listings start
# without torch (issue 46): `fedleak.attacks`, `fedleak.audit(...)`, `from fedleak import Update` all work as
# before and import what they need when first touched.
_SUBMODULES = ("attacks", "audit", "data", "fl", "metrics", "models")
_NAMES = {
    "Defense": "fl", "client_update": "fl",
    "ClientData": "types", "DataSpec": "types", "Protocol": "types", "Reconstruction": "types", "Update": "types",
    "attack_update": "workflows", "convert_gguf": "workflows", "inspect_model_file": "workflows",
    "report_run": "workflows", "run_experiment": "workflows", "simulate_update": "workflows",
    "dp_audit": "privacy",  # scipy's statistics are not needed by the rest
}

__all__ = ["ClientData", "DataSpec", "Defense", "FedleakError", "Protocol", "Reconstruction", "Update",
           "__version__", "attack_update", "attacks", "audit", "client_update", "convert_gguf", "data", "dp_audit", "fl",
           "inspect_model_file", "metrics", "models", "report_run", "run_experiment", "simulate_update"]


__getattr__ = attributes(__name__, _NAMES, _SUBMODULES)


def __dir__():
    return sorted(set(globals()) | set(__all__))
