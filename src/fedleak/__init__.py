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
"""

from . import attacks, audit, data, fl, metrics, models
from .errors import FedleakError
from .fl import Defense, client_update
from .types import ClientData, DataSpec, Protocol, Reconstruction, Update

__version__ = "0.1.0"

__all__ = ["ClientData", "DataSpec", "Defense", "FedleakError", "Protocol", "Reconstruction", "Update",
           "__version__", "attacks", "audit", "client_update", "data", "fl", "metrics", "models"]
