"""Job and result files fedleak wrote, edited before a resume (issue 47 class 8).

Every job file fedleak writes is sealed with its ``record_digest``; one whose digest was deleted or nulled is
not fedleak's: it is kept aside and the job re-run, never reused, so an edited ``"psnr": 999`` never reaches
``results.jsonl``.
"""

from __future__ import annotations

import json

import pytest

from fedleak.config import parse_config
from fedleak.runs import Runner
from fedleak.runs.job_files import reusable, sealed

RAW = {"name": "tiny", "data": {"dataset": "digits", "num_clients": 1, "samples_per_client": 2},
       "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
       "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": 2}}}}


def _record(**extra):
    return sealed({"setting": "s", "variant": "v", "attack": "agic", "client": "c0", "client_index": 0,
                   "num_samples": 2, "seconds": 1.5, "job_hash": "abc", "psnr": 12.5, **extra})


DIGEST_EDITS = {
    "digest deleted": lambda r: {k: v for k, v in r.items() if k != "record_digest"},
    "digest null": lambda r: {**r, "record_digest": None},
    "digest empty": lambda r: {**r, "record_digest": ""},
}


@pytest.mark.parametrize("case", list(DIGEST_EDITS))
def test_a_job_file_without_its_digest_is_not_reused(tmp_path, case):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(DIGEST_EDITS[case]({**_record(), "psnr": 999.0})))
    record, why = reusable(path, "abc")
    assert record is None and "record_digest" in why and "\n" not in why, why
    path.write_text(json.dumps(_record()))  # the untouched file is reused
    assert reusable(path, "abc")[0] is not None


@pytest.mark.parametrize("case", ["digest deleted", "digest null"])
def test_an_edited_psnr_without_its_digest_never_reaches_results_jsonl(tmp_path, case):
    """The issue's instance end to end: run, edit a job file (psnr 999, digest deleted or nulled), resume."""
    out = tmp_path / "out"
    Runner(parse_config(RAW), out, show_progress=False, log=lambda *_: None).run()
    job = next((out / "jobs").rglob("*.json"))
    record = json.loads(job.read_text())
    job.write_text(json.dumps(DIGEST_EDITS[case]({**record, "psnr": 999.0})))
    lines = []
    Runner(parse_config(RAW), out, show_progress=False, log=lines.append).run()
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["psnr"] != 999.0 and rows[0]["record_digest"]
    assert job.with_name(job.name + ".stale").is_file()  # kept aside, never deleted
    assert any("record_digest" in str(line) for line in lines), lines
