"""Running many jobs resumably, locally or on Ray: the experiment runner (:mod:`.experiment`), the
executors (:mod:`.execution`), job files and their identity (:mod:`.job_files`, :mod:`.naming`), the
run's report (:mod:`.run_report`), output folders (:mod:`.outdir`) and safetensors + JSON storage
(:mod:`.storage`).

The heavy names are imported on first use, so that low-level modules (``fedleak.types`` reads and
writes through :mod:`.storage`) can import this package without importing the runner.
"""

from importlib import import_module

_NAMES = {
    "Runner": "experiment", "run_experiment": "experiment", "threat_metadata": "experiment",
    "LocalExecutor": "execution", "RayExecutor": "execution", "make_executor": "execution",
    "report_run": "run_report", "summarize": "run_report", "write_outputs": "run_report",
    "load_results": "job_files", "job_hash": "job_files",
    "prepare_out_dir": "outdir", "file_name": "naming", "check_distinct": "naming",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'fedleak.runs' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
