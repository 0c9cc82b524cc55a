"""docs/verdict.md's measured tables are those benchmarks/regen_docs.py rebuilds from benchmarks/results/*.json,
and no measured claim there lacks a results file (about 1 s)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_tables_match_the_results_files():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "regen_docs.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_a_claim_without_a_file_fails(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import regen_docs
    finally:
        sys.path.pop(0)
    doc = tmp_path / "d.md"
    doc.write_text("# x\n\n## Measurements\n\nSPEAR recovers 16 of 16 images in 50 s.\n\n## Next\n")
    monkeypatch.setattr(regen_docs, "DOCS", (doc,))
    monkeypatch.setattr(regen_docs, "ROOT", tmp_path)
    assert regen_docs.regenerate(check=True) == 1
    doc.write_text("# x\n\n## Measurements\n\nSPEAR: 16 of 16 (`benchmarks/results/none.json`).\n")
    assert regen_docs.regenerate(check=True) == 1  # the named file does not exist
    doc.write_text("# x\n\n## Measurements\n\n<!-- regen:nothing -->\n<!-- /regen:nothing -->\n")
    assert regen_docs.regenerate(check=True) == 1  # a block without a builder
