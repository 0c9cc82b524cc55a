"""The stylesheet every fedleak HTML report starts from (the audit, the run report, the Flower dashboard)."""

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --rule: #d1d9e0; --panel: #f6f8fa; --accent: #0b5cad; }
* { box-sizing: border-box; }
body { margin: 0; padding: 2rem 1rem 3rem; color: var(--ink); background: #fff;
  font: 15px/1.55 -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; }
h1 { font-size: 1.7rem; margin: 0 0 1.5rem; padding-bottom: .5rem; border-bottom: 2px solid var(--accent); }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .8rem; padding-bottom: .3rem; border-bottom: 1px solid var(--rule); }
p { margin: .5rem 0; white-space: pre-wrap; }
nav { background: var(--panel); border: 1px solid var(--rule); border-radius: 6px; padding: .6rem 1rem; }
nav ol { margin: .2rem 0; padding-left: 1.3rem; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
.table-wrap { overflow-x: auto; margin: .8rem 0; }
table { border-collapse: collapse; font-size: .92rem; }
th, td { padding: .35rem .75rem; border: 1px solid var(--rule); text-align: left; }
th { background: var(--panel); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
.figures { display: flex; flex-wrap: wrap; gap: 1.2rem; margin: .8rem 0; }
figure { margin: 0; max-width: 100%; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--rule);
  image-rendering: pixelated; }
figcaption { color: var(--muted); font-size: .88rem; margin-top: .3rem; }
footer { margin-top: 3rem; color: var(--muted); font-size: .8rem; border-top: 1px solid var(--rule); padding-top: .6rem; }
"""
