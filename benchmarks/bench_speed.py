"""Per-iteration speed, FLOPs, % of the matmul peak and peak memory of the attack loops (issue #11).

Cases (1 thread each, every case in its own process so that its peak RSS is its own):

* ``ig_fedsgd_convnet`` / ``ig_fedsgd_resnet18`` — Inverting Gradients on a FedSGD gradient of one
  32×32×3 image (ConvNet width 64, CIFAR-style ResNet-18);
* ``ig_fedavg_convnet`` / ``ig_fedavg_resnet18`` — IG's local-step simulation of a FedAvg update of
  4 steps × 2 images (E = 4, m = N = 2);
* ``dimitrov_E10_m5`` / ``dimitrov_E10_m1`` — Dimitrov et al. (per-epoch variables, epoch prior) on
  femnist-cnn, N = 50, E = 10 with m = 5 (100 unrolled steps) and m = 1 (E·B = 500 steps);
* ``dimitrov_E10_m1_ckpt`` — the same with ``checkpoint_every`` = 22 (≈ √500).

For each: seconds per iteration (median over interleaved rounds, taken between the loop's own
per-step progress callbacks, so label inference and setup are excluded; CPU seconds of the one
thread, which a loaded shared machine disturbs far less than wall seconds, also recorded), FLOPs per iteration
(:class:`torch.utils.flop_counter.FlopCounterMode`: a run of 2 iterations minus a run of 1),
achieved GFLOP/s, % of this machine's float32 matmul peak (1 thread, best of several 1024³
products measured in every round next to the attack, so that both see the same load) and the
process's peak RSS.

The IG cases are compared with a *reference iteration*: the same models rebuilt from breaching's
published architecture definitions (``breaching/cases/models``: ``ConvNet`` width 64 and the
CIFAR-stem ResNet-18 with type-B shortcuts; written here, breaching is not a dependency), given the
same weights, and the minimum-FLOP objective — one gradient (or the unrolled steps) with
``create_graph``, cosine distance + TV, backward to the image only, signed Adam step. Rounds
alternate fedleak and reference so load changes hit both alike.

    nice -n 10 python benchmarks/bench_speed.py [--cases a,b] [--iterations 4] [--rounds 3]
        [--src DIR] [--label after] [--out benchmarks/results/speed.json]

``--src`` benchmarks another copy of fedleak's sources (e.g. ``git archive`` of an older commit) for a
before/after comparison; results are merged into ``--out`` under ``--label`` (case by case, so
cases of one label may come from several invocations, e.g. alternating before/after per case).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default

CASES = ("ig_fedsgd_convnet", "ig_fedsgd_resnet18", "ig_fedavg_convnet", "ig_fedavg_resnet18",
         "dimitrov_E10_m5", "dimitrov_E10_m1", "dimitrov_E10_m1_ckpt")
CIFAR = dict(name="cifar10", shape=(3, 32, 32), num_classes=10, mean=(0.4914, 0.4822, 0.4465),
             std=(0.2470, 0.2435, 0.2616))


# ----------------------------------------------------------------------------------------------
# breaching's architectures, rebuilt (same layer order and shapes, so weights copy over by position)

def reference_convnet(channels: int, classes: int, width: int = 64) -> nn.Module:
    """breaching ``ConvNet``: 8 × (conv3×3 + BN + ReLU), widths w·(1,2,2,4,4,4,4,4), max-pool 3 after
    the 6th and 8th block, linear on 36·w features."""
    layers, c_in = OrderedDict(), channels
    for i, factor in enumerate((1, 2, 2, 4, 4, 4, 4, 4)):
        layers[f"conv{i}"] = nn.Conv2d(c_in, factor * width, 3, padding=1)
        layers[f"bn{i}"] = nn.BatchNorm2d(factor * width)
        layers[f"relu{i}"] = nn.ReLU()
        c_in = factor * width
        if i in (5, 7):
            layers[f"pool{i}"] = nn.MaxPool2d(3)
    layers["flatten"] = nn.Flatten()
    layers["linear"] = nn.Linear(36 * width, classes)
    return nn.Sequential(layers)


class _ReferenceBlock(nn.Module):
    """breaching's ``BasicBlock`` with a type-B (1×1 conv + BN) shortcut when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def reference_resnet18(channels: int, classes: int) -> nn.Module:
    """breaching ``ResNet`` (ResNet-18, ``stem="CIFAR"``): conv3×3 + BN + ReLU stem without pooling,
    [2, 2, 2, 2] basic blocks of 64…512 channels, strides 1/2/2/2, global average pool, linear."""
    layers, c_in = [nn.Conv2d(channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_ReferenceBlock(c_in, width, stride), _ReferenceBlock(width, width, 1)]
        c_in = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def copy_weights(source: nn.Module, target: nn.Module) -> None:
    """Copy parameters and buffers in registration order (the architectures list them alike)."""
    src, dst = list(source.state_dict().values()), target.state_dict()
    if len(src) != len(dst) or any(a.shape != b.shape for a, b in zip(src, dst.values())):
        raise SystemExit("the reference architecture does not line up with fedleak's model")
    target.load_state_dict(OrderedDict(zip(dst.keys(), src)))


# ----------------------------------------------------------------------------------------------
# the minimum-FLOP reference IG iteration

class ReferenceIG:
    """IG's objective on ``steps`` unrolled local steps (1: a FedSGD gradient), nothing more."""

    def __init__(self, model: nn.Module, observed: list[torch.Tensor], labels, steps: int, lr: float, shape):
        self.model, self.labels, self.steps, self.lr = model.train(), labels, steps, lr
        self.names = [n for n, _ in model.named_parameters()]
        self.start = [p.detach() for p in model.parameters()]
        self.buffers = {k: v.clone() for k, v in model.named_buffers()}
        self.observed = observed
        self.observed_norm = torch.sqrt(sum(o.pow(2).sum() for o in observed))
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn((labels.shape[0], *shape), generator=generator).requires_grad_(True)
        self.optimizer = torch.optim.Adam([self.x], lr=0.1)

    def iteration(self) -> None:
        from torch.func import functional_call

        self.optimizer.zero_grad(set_to_none=True)
        params = [p.requires_grad_(True) for p in (t.detach() for t in self.start)]
        current = params
        total = None
        for _ in range(self.steps):
            logits = functional_call(self.model, {**dict(zip(self.names, current)), **self.buffers}, (self.x,))
            loss = nn.functional.cross_entropy(logits, self.labels)
            grads = torch.autograd.grad(loss, current, create_graph=True)
            total = grads if total is None else [t + g for t, g in zip(total, grads)]
            if self.steps > 1:
                current = [p - self.lr * g for p, g in zip(current, grads)]
        dot = sum((o * t).sum() for o, t in zip(self.observed, total))
        norm = torch.sqrt(sum(t.pow(2).sum() for t in total))
        x = self.x
        tv = (x[..., :, 1:] - x[..., :, :-1]).abs().mean() + (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
        objective = 1 - dot / (self.observed_norm * norm + 1e-12) + 1e-4 * tv
        objective.backward(inputs=[self.x])
        self.x.grad.sign_()
        self.optimizer.step()


# ----------------------------------------------------------------------------------------------
# one case, in a worker process

def _case_setup(case: str):
    import fedleak
    from fedleak.types import DataSpec, Protocol

    torch.manual_seed(0)
    if case.startswith("ig_"):
        spec = DataSpec(**CIFAR)
        fedsgd = "fedsgd" in case
        n = 1 if fedsgd else 2
        arch = "convnet" if case.endswith("convnet") else "resnet18"
        model = fedleak.models.build(arch, spec, seed=0)
        reference = reference_convnet(3, 10) if arch == "convnet" else reference_resnet18(3, 10)
        copy_weights(model, reference)
        images = torch.randn((n, 3, 32, 32), generator=torch.Generator().manual_seed(1))
        labels = torch.arange(n) % 10
        protocol = Protocol("fedsgd") if fedsgd else Protocol("fedavg", epochs=4, batch_size=2, lr=0.01)
        options = dict(labels="known")
        return "inverting-gradients", spec, model, fedleak.ClientData(images, labels), protocol, options, reference
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=50, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    batch = 5 if "_m5" in case else 1
    protocol = Protocol("fedavg", epochs=10, batch_size=batch, lr=0.004)
    options = dict(labels="known", match_epochs=False)
    if case.endswith("_ckpt"):
        options["checkpoint_every"] = 22
    return "dimitrov", spec, model, clients[0], protocol, options, None


def _stamp() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def _median_intervals(stamps) -> tuple[float, float]:
    """Median CPU and wall seconds between consecutive stamps."""
    return tuple(statistics.median(b[i] - a[i] for a, b in zip(stamps, stamps[1:])) for i in (0, 1))


def _timed_attack(fedleak, name, options, update, model, spec, iterations: int) -> tuple[float, float]:
    """Median (CPU, wall) seconds between consecutive per-step callbacks of the attack's loop."""
    stamps = []
    with fedleak.attacks.optimize.progress_reporter(lambda step, total, loss: stamps.append(_stamp())):
        fedleak.attacks.build(name, iterations=iterations + 1, log_every=1, **options).reconstruct(update, model, spec)
    return _median_intervals(stamps)


def _flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def run_case(case: str, iterations: int, rounds: int) -> dict:
    import fedleak
    import fedleak.attacks.optimize  # noqa: F401 (progress_reporter)

    torch.set_num_threads(1)
    name, spec, model, data, protocol, options, reference = _case_setup(case)
    update = fedleak.client_update(model, data, protocol, seed=0)
    update.metadata["labels"] = data.labels.tolist()

    def attack(k):
        return lambda: fedleak.attacks.build(name, iterations=k, log_every=1, **options).reconstruct(update, model, spec)

    result = {"case": case, "attack": name, "options": options, "local_steps": update.num_steps,
              "num_samples": update.num_samples}
    ref = None
    if reference is not None:
        observed = [update.pseudo_gradient()[k] for k, _ in model.named_parameters()]
        ref = ReferenceIG(reference, observed, data.labels, update.num_steps, protocol.lr, spec.shape)
    ours, theirs, peaks = [], [], []
    for _ in range(rounds):
        peaks.append(matmul_peak_gflops(repeats=6))
        ours.append(_timed_attack(fedleak, name, options, update, model, spec, iterations))
        if ref is not None:
            stamps = [_stamp()]
            for _ in range(iterations):
                ref.iteration()
                stamps.append(_stamp())
            theirs.append(_median_intervals(stamps))
    # CPU seconds of the one thread: on a shared machine they vary far less than wall time
    result["seconds_per_iteration"] = statistics.median(c for c, _ in ours)
    result["wall_seconds_per_iteration"] = statistics.median(w for _, w in ours)
    result["seconds_per_iteration_rounds"] = [c for c, _ in ours]
    if ref is not None:
        result["reference_seconds_per_iteration"] = statistics.median(c for c, _ in theirs)
        result["reference_wall_seconds_per_iteration"] = statistics.median(w for _, w in theirs)
        result["reference_seconds_per_iteration_rounds"] = [c for c, _ in theirs]
        result["speed_vs_reference"] = result["reference_seconds_per_iteration"] / result["seconds_per_iteration"]
    # peak RSS of the attack itself, before FlopCounterMode (whose bookkeeping holds memory of its own)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    flops = result["flops_per_iteration"] = _flops(attack(2)) - _flops(attack(1))
    if ref is not None:
        result["reference_flops_per_iteration"] = _flops(ref.iteration)
    result["gflops_per_second"] = flops / 1e9 / result["seconds_per_iteration"]
    result["matmul_peak_gflops_in_run"] = max(peaks)
    return result


def matmul_peak_gflops(size: int = 1024, repeats: int = 12) -> float:
    """Best observed float32 matmul throughput on 1 thread (2·n³ FLOPs per product)."""
    torch.set_num_threads(1)
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        torch.mm(a, b)
        best = min(best, time.process_time() - start)
    return 2 * size ** 3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--iterations", type=int, default=4, help="timed iterations per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"),
                        help="fedleak sources to benchmark (default: this checkout)")
    parser.add_argument("--label", default="after", help="key of this run in the output file")
    parser.add_argument("--out", default=fresh("speed.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(run_case(args.worker, args.iterations, args.rounds)))
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; allowed: {', '.join(CASES)}")
    load_before = list(os.getloadavg())
    peak = matmul_peak_gflops()
    print(f"float32 matmul peak (1 thread): {peak:.1f} GFLOP/s", flush=True)
    env = {**os.environ, "PYTHONPATH": args.src, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    results = {}
    for case in cases:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--worker", case, "--iterations", str(args.iterations),
                               "--rounds", str(args.rounds)], env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"{case}: failed\n{done.stderr[-2000:]}", flush=True)
            results[case] = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no result"}
            continue
        r = json.loads(lines[-1][len("RESULT "):])
        peak = max(peak, r["matmul_peak_gflops_in_run"])
        r["percent_of_matmul_peak"] = 100 * r["gflops_per_second"] / r["matmul_peak_gflops_in_run"]
        r["wall_seconds"] = time.perf_counter() - started
        results[case] = r
        extra = f", {r['speed_vs_reference']:.2f}× the reference" if "speed_vs_reference" in r else ""
        print(f"{case:>22}: {r['seconds_per_iteration']:.3f} s/it, {r['flops_per_iteration'] / 1e9:.2f} GFLOP/it, "
              f"{r['percent_of_matmul_peak']:.0f} % of peak, {r['peak_rss_mib']:.0f} MiB RSS{extra}", flush=True)
    out = Path(args.out)
    payload = json.loads(out.read_text()) if out.exists() else {}
    previous = payload.get(args.label, {}).get("results", {})
    payload[args.label] = {
        "benchmark": "attack seconds / FLOPs per iteration (issue #11)", "src": args.src,
        "machine": platform.machine(), "processor": platform.processor(), "torch": torch.__version__,
        "threads": 1, "load_average_before": load_before, "load_average": list(os.getloadavg()),
        "matmul_peak_gflops": peak,
        "iterations_per_round": args.iterations, "rounds": args.rounds, "results": {**previous, **results},
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
