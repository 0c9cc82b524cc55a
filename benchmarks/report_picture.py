"""The README's picture of the audit report: ``docs/report.png``, a screenshot of a real ``report.html``.

    .venv/bin/python benchmarks/report_picture.py [--report runs/audit] [--height 4200] [--crops 0-716,1905-2665]

Renders the report folder's ``report.html`` (default: run ``fedleak audit --out runs/audit`` first, the
README's first command) in headless Chromium (Debian package ``chromium``), stacks the ``--crops`` (pixel rows
of the page: the verdicts, then image grids of originals beside reconstructions), scales it to ``--scale`` of
its width and writes it with a 64-colour palette so that the file stays small. No network: the report is
self-contained. ``docs/report.png`` is ``--report`` of ``fedleak audit --quick`` (seed 0) with the crops above.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", default=str(ROOT / "runs" / "audit"), help="an audit's output folder")
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--height", type=int, default=1250)
    parser.add_argument("--crops", default="", help="comma-separated pixel rows Y0-Y1 to stack (default: the page)")
    parser.add_argument("--scale", type=float, default=0.8)
    parser.add_argument("--out", default=str(ROOT / "docs" / "report.png"))
    args = parser.parse_args()
    page = Path(args.report) / "report.html"
    if not page.is_file():
        raise SystemExit(f"report_picture: {page} is missing: run `.venv/bin/fedleak audit --out {args.report}` first")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("report_picture: needs Chromium (Debian/Ubuntu: apt-get install chromium)")
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        shot = Path(tmp) / "shot.png"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp}/profile",
                 f"--window-size={args.width},{args.height}", "--hide-scrollbars", "--virtual-time-budget=5000",
                 f"--screenshot={shot}", page.resolve().as_uri()]
        subprocess.run([chromium, *flags], capture_output=True, text=True, timeout=180, check=True)
        with Image.open(shot) as img:
            page_img = img.convert("RGB")
        rows = [tuple(int(y) for y in part.split("-")) for part in args.crops.split(",") if part] \
            or [(0, page_img.height)]
        parts = [page_img.crop((0, y0, page_img.width, min(y1, page_img.height))) for y0, y1 in rows]
        picture = Image.new("RGB", (page_img.width, sum(p.height for p in parts)), "white")
        y = 0
        for part in parts:
            picture.paste(part, (0, y))
            y += part.height
        picture = picture.resize((round(picture.width * args.scale), round(picture.height * args.scale)),
                                 Image.Resampling.LANCZOS)
        picture.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size // 1024} KiB) from {page}")


if __name__ == "__main__":
    sys.exit(main())
