"""The shape of ``src/fedleak`` (issue 32): module sizes, import circles, cross-package private imports, duplicates.

    python benchmarks/code_shape.py --label before      # adds/replaces the "before" entry
    python benchmarks/code_shape.py --label after

Writes ``benchmarks/results/code_shape.json`` (one entry per label, the others kept). Read with ``ast``, nothing
imported or run:

- ``modules``: how many ``.py`` files, their lines in all, the ten largest (lines as ``wc -l`` counts them).
- ``circles``: strongly connected components (more than one module) of the import graph. An edge is every
  ``import``/``from ... import`` statement anywhere in a module, *inside functions too* (a lazy import still
  ties the two modules together), resolved to the module it names: ``from pkg import name`` is an edge to
  ``pkg.name`` when that is a module, else to ``pkg``. Importing ``pkg.sub`` is an edge to ``pkg.sub`` only
  (Python runs ``pkg/__init__`` first, but counting that would make every re-exporting package a circle).
- ``private_imports``: ``from M import _name`` (``_name`` not a dunder) where ``M``'s package is not the
  importing module's own package (package = the folder a module sits in; ``audit/execute/engine.py`` and
  ``audit/judge/verdict.py`` are in different packages), plus ``import M as m; m._name`` attribute reads of the
  same kind (``private_attribute_uses``).
- ``duplicate_pairs``: the first line of ``duplicates --repo src/fedleak --seconds 120``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PKG = SRC / "fedleak"
OUT = ROOT / "benchmarks" / "results" / "code_shape.json"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(name: str, path: Path) -> str:
    """The package a module sits in (a package's ``__init__`` is its own package)."""
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def resolve(node: ast.ImportFrom, name: str, path: Path) -> str:
    if node.level == 0:
        return node.module or ""
    base = package_of(name, path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan():
    modules = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}
    edges: dict[str, set] = {m: set() for m in modules}
    private = []
    attribute_uses = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        own = package_of(name, path)
        aliases = {}  # local name -> module, for m._name reads
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        edges[name].add(a.name)
                        if a.asname:
                            aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                target = resolve(node, name, path)
                if not target.startswith("fedleak"):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:
                        edges[name].add(sub)
                        aliases[a.asname or a.name] = sub
                    elif target in modules:
                        edges[name].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            src_pkg = package_of(target, modules[target])
                            if src_pkg != own:
                                private.append({"importer": name, "module": target, "name": a.name,
                                                "line": node.lineno})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                if node.attr.startswith("_") and not node.attr.startswith("__") \
                        and package_of(target, modules[target]) != own:
                    attribute_uses.append({"importer": name, "module": target, "name": node.attr,
                                           "line": node.lineno})
        edges[name].discard(name)
    return modules, edges, private, attribute_uses


def strongly_connected(edges: dict) -> list[list[str]]:
    """Tarjan's algorithm (iterative), components of more than one module."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return sorted(out, key=lambda c: (-len(c), c))


def duplicates() -> dict:
    try:
        text = subprocess.run(["duplicates", "--repo", str(PKG), "--seconds", "120"], capture_output=True,
                              text=True, timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"pairs": None, "line": f"duplicates did not run: {exc}"}
    first = text.splitlines()[0] if text else ""
    m = re.match(r"(\d+) pairs?", first)
    return {"pairs": int(m.group(1)) if m else (0 if first.startswith("no duplicates") else None), "line": first}


def measure() -> dict:
    modules, edges, private, attribute_uses = scan()
    lines = {m: len(p.read_text().splitlines()) for m, p in modules.items()}
    largest = sorted(lines.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    circles = strongly_connected(edges)
    return {
        "modules": {"count": len(modules), "lines": sum(lines.values()),
                    "largest": [{"module": m, "lines": n} for m, n in largest],
                    "over_400": sorted(m for m, n in lines.items() if n > 400)},
        "circles": {"count": len(circles), "modules_in_circles": sum(len(c) for c in circles),
                    "components": circles,
                    "counted": "every import statement, inside functions too; package __init__ not implied"},
        "private_imports": {"count": len(private), "by_importer": private},
        "private_attribute_uses": {"count": len(attribute_uses), "uses": attribute_uses},
        "duplicates": duplicates(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="now", help="the entry to write (e.g. before, after)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    result = measure()
    out = Path(args.out)
    existing = json.loads(out.read_text()) if out.is_file() else {}
    existing[args.label] = result
    out.write_text(json.dumps(existing, indent=1) + "\n")
    m = result["modules"]
    print(f"{args.label}: {m['count']} modules, {m['lines']} lines; largest "
          + ", ".join(f"{d['module'].removeprefix('fedleak.')} {d['lines']}" for d in m["largest"][:5]))
    print(f"circles: {result['circles']['count']} ({result['circles']['modules_in_circles']} modules)")
    for comp in result["circles"]["components"]:
        print("  " + " <-> ".join(c.removeprefix("fedleak.") for c in comp))
    print(f"cross-package private imports: {result['private_imports']['count']}, "
          f"attribute uses: {result['private_attribute_uses']['count']}")
    print(f"duplicates: {result['duplicates']['line']}")


if __name__ == "__main__":
    main()
