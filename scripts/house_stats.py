"""The house's figures, each with its counting rule pinned (issue 29's baselines and goals).

Usage: scripts/house_stats [--json]

Figures and rules:
- ``root_modules``: ``loadgen/*.py`` files directly in the package, ``__init__.py`` excluded.
- ``modules``, ``lines``: every ``*.py`` below ``loadgen/``; lines as ``wc -l`` counts them.
- ``test_lines``: the same over ``tests/``.
- ``import_circles``: strongly connected components of two or more modules in the import graph
  that ``tests/unit/test_architecture.py`` builds (every import, function-level and
  ``TYPE_CHECKING`` ones included).
- ``largest_module``: the module with the most lines, and its count.
- ``modules_over_540``: modules within 60 lines of the 600-line cap.
- ``duplicate_pairs``: pairs of places in ``loadgen/`` that share 6 or more identical or
  same-shape lines, as the workplace's ``duplicates --repo loadgen`` counts them (``null`` where
  that command is not installed, e.g. on CI).
- ``any_annotations``: annotations (of an argument, a return, or an annotated assignment) whose
  whole expression is ``Any`` or ``typing.Any``, read with ``ast``; ``Any`` nested inside another
  type (``dict[str, Any]``) is counted apart as ``any_nested``.
- ``same_named_files``: file names that stand more than once below ``loadgen/`` (``__init__.py``
  excluded), with their count.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "loadgen"


def _lines(p: Path) -> int:
    return p.read_bytes().count(b"\n")


def _is_any(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any" and isinstance(node.value, ast.Name) and node.value.id in ("typing", "t")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip() == "Any"
    return False


def _has_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    return any(_is_any(n) for n in ast.walk(node) if isinstance(n, ast.expr))


def any_counts(files: list[Path]) -> tuple[int, int]:
    whole = nested = 0
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            anns: list[ast.expr | None] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                    if arg is not None:
                        anns.append(arg.annotation)
                anns.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                anns.append(node.annotation)
            for ann in anns:
                if _is_any(ann):
                    whole += 1
                elif _has_any(ann):
                    nested += 1
    return whole, nested


def duplicate_pairs() -> int | None:
    exe = shutil.which("duplicates")
    if exe is None:
        return None
    out = subprocess.run(
        [exe, "--repo", str(PKG), "--most", "1", "--seconds", "120"], capture_output=True, text=True, check=False
    ).stdout
    m = re.match(r"(\d+) pairs", out)
    return int(m.group(1)) if m else (0 if out.startswith("no duplicates") else None)


def import_circles() -> list[tuple[str, ...]]:
    spec = importlib.util.spec_from_file_location("_house_arch", ROOT / "tests" / "unit" / "test_architecture.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.circles(mod.GRAPH))


def stats() -> dict[str, object]:
    files = sorted(PKG.rglob("*.py"))
    sizes = {str(f.relative_to(ROOT)): _lines(f) for f in files}
    largest = max(sizes, key=lambda k: sizes[k])
    names = Counter(f.name for f in files if f.name != "__init__.py")
    whole, nested = any_counts(files)
    return {
        "root_modules": sum(1 for f in PKG.glob("*.py") if f.name != "__init__.py"),
        "modules": len(files),
        "lines": sum(sizes.values()),
        "test_lines": sum(_lines(f) for f in (ROOT / "tests").rglob("*.py")),
        "import_circles": len(import_circles()),
        "largest_module": [largest, sizes[largest]],
        "modules_over_540": sum(1 for v in sizes.values() if v > 540),
        "duplicate_pairs": duplicate_pairs(),
        "any_annotations": whole,
        "any_nested": nested,
        "same_named_files": {k: v for k, v in sorted(names.items()) if v > 1},
    }


def main() -> int:
    s = stats()
    if "--json" in sys.argv[1:]:
        print(json.dumps(s, indent=1))
        return 0
    for k, v in s.items():
        print(f"{k:<18} {v if v is not None else 'n/a (the duplicates command is not installed)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
