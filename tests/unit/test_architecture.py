"""The house rules of docs/architecture.md, checked from the code's own imports.

Every ``import`` and ``from ... import`` in every module of ``loadgen/`` is read with
``ast`` (function-level and ``TYPE_CHECKING`` imports included: an import hidden in a
function is still an arrow). The rules:

1. No import circle between modules.
2. Arrows point down: a module imports only modules on its own floor or below (FLOORS).
3. Nothing below ``cli/`` imports ``cli``; nothing imports ``locust/``.
4. Only the network rooms open sockets (SOCKET_ROOMS).
5. ``measurement``, ``workers`` and ``sweep`` import no concrete endpoint.
6. No module over 600 lines; at most 12 modules directly in ``loadgen/``.

ALLOWED lists today's known violations; it may only shrink, and is empty when the
redesign is done.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "loadgen"
MAX_LINES = 600

# floor of each room (a module, or a package prefix); lower floors never import higher ones
FLOORS: dict[str, int] = {
    # ground floor: plain data, clocks, parsers, definitions
    "loadgen": 0,  # the package face only re-exports (checked separately)
    "loadgen.version": 0,
    "loadgen.core": 0,
    # what is sent, over what, against what
    "loadgen.workload": 1,
    "loadgen.endpoints": 1,
    "loadgen.serve": 1,
    "loadgen.sim": 1,
    # one run's engine and its records; the session engine beside it
    "loadgen.engine": 2,
    "loadgen.telemetry": 2,
    "loadgen.sessions": 2,  # the package: turns (the session engine) and planning
    # the same run spread over processes or machines (a worker runs the same runner)
    "loadgen.spread": 3,
    "loadgen.sessions.spread": 3,  # --sessions over --workers
    # one measured run (here, or spread by workers / cluster)
    "loadgen.measurement": 4,
    "loadgen.sessions.measured": 4,  # one measured session run
    # searches, checks, reports
    "loadgen.sweep": 5,
    "loadgen.check": 5,
    "loadgen.report": 5,
    "loadgen.capacity": 5,
    # the top floor and the leaf
    "loadgen.cli": 6,
    "loadgen.locust": 7,
}

SOCKET_ROOMS = (
    "loadgen.endpoints",
    "loadgen.serve",
    "loadgen.sim",
    "loadgen.locust",
    "loadgen.check",
    "loadgen.spread.cluster",
    "loadgen.telemetry",
)
SOCKET_PATTERN = re.compile(
    r"^\s*(import aiohttp|from aiohttp|import http\.client|from http\.client|import urllib\.request"
    r"|from urllib\.request|import grpc|from grpc|import tritonclient|from tritonclient)"
    r"|socket\.socket\(|socket\.create_connection\(|asyncio\.open_connection\(|asyncio\.start_server\(",
    re.M,
)
CONCRETE_ENDPOINTS = (
    "loadgen.endpoints.openai",
    "loadgen.endpoints.anthropic",
    "loadgen.endpoints.triton",
    "loadgen.endpoints.triton_grpc",
)
NO_CONCRETE_ENDPOINT = ("loadgen.measurement", "loadgen.spread.workers", "loadgen.sweep")

# today's known violations: (rule, module[, target]). Shrinks only; empty at the end of the redesign.
ALLOWED: set[tuple[str, ...]] = set()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


MODULES = _modules()


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".")
    is_pkg = MODULES[mod].name == "__init__.py"
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str) -> str | None:
    """The loadgen module an imported dotted name lands on (the longest module prefix)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES:
            return cand
        parts.pop()
    return None


def imports_of(mod: str) -> set[str]:
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, node)
            names = [f"{base}.{a.name}" for a in node.names] if base.startswith("loadgen") else [base]
        else:
            continue
        for n in names:
            if not n.startswith("loadgen"):
                continue
            t = _target(n)
            if t is not None and t != mod:
                out.add(t)
    return out


# the package face (loadgen/__init__.py) loads its public names lazily and names them for type
# checkers only under TYPE_CHECKING: it has no arrows of its own (every module may read __version__)
GRAPH = {m: (set() if m == "loadgen" else imports_of(m)) for m in MODULES}


def _floor(mod: str) -> int:
    parts = mod.split(".")
    while parts:
        key = ".".join(parts)
        if key in FLOORS:
            return FLOORS[key]
        parts.pop()
    raise KeyError(mod)


def _violations(rule: str, found: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return [v for v in found if (rule, *v) not in ALLOWED]


def test_every_module_has_a_floor() -> None:
    missing = []
    for m in MODULES:
        try:
            _floor(m)
        except KeyError:
            missing.append(m)
    assert not missing, f"give these modules a floor in FLOORS (and docs/architecture.md): {missing}"


def circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The import circles of ``graph`` (Tarjan's strongly connected components of 2+ modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[tuple[str, ...]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def test_no_import_circle() -> None:
    found = circles(GRAPH)
    assert not _violations("circle", found), f"import circles: {found}"


def _is_face(mod: str) -> bool:
    return MODULES[mod].name == "__init__.py"


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module stands on a higher floor."""
    found = []
    for m, targets in graph.items():
        for t in targets:
            # a package face may re-export its own members; a member may not import a higher floor
            if _floor(t) > _floor(m) and not (m in MODULES and _is_face(m) and t.startswith(m + ".")):
                found.append((m, t))
    return sorted(found)


def test_arrows_point_down() -> None:
    bad = _violations("upward", upward(GRAPH))
    assert not bad, "imports that run up a floor (importer, imported): " + repr(bad)


def into_top_or_leaf(graph: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """Imports of ``cli`` from below it, and of ``locust`` from anywhere else."""
    found = []
    for m, targets in graph.items():
        for t in targets:
            for room in ("cli", "locust"):
                if t.startswith(f"loadgen.{room}") and not m.startswith(f"loadgen.{room}"):
                    found.append((room, m, t))
    return sorted(found)


def test_nothing_below_cli_imports_it_and_nothing_imports_locust() -> None:
    bad = [f for f in into_top_or_leaf(GRAPH) if f not in ALLOWED]
    assert not bad, repr(bad)


def socket_openers(texts: dict[str, str]) -> list[tuple[str]]:
    """Modules outside SOCKET_ROOMS whose source opens or imports a network client or server."""
    return [(m,) for m, text in sorted(texts.items()) if not m.startswith(SOCKET_ROOMS) and SOCKET_PATTERN.search(text)]


def test_only_network_rooms_open_sockets() -> None:
    texts = {m: p.read_text(encoding="utf-8") for m, p in MODULES.items()}
    bad = _violations("socket", socket_openers(texts))
    assert not bad, f"modules outside {SOCKET_ROOMS} that open sockets: {bad}"


def concrete_endpoint_users(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    found = []
    for m, targets in sorted(graph.items()):
        if m.startswith(NO_CONCRETE_ENDPOINT):
            found += [(m, t) for t in sorted(targets) if t in CONCRETE_ENDPOINTS]
    return found


def test_measure_workers_sweep_know_no_concrete_endpoint() -> None:
    bad = _violations("concrete-endpoint", concrete_endpoint_users(GRAPH))
    assert not bad, repr(bad)


def test_no_module_over_600_lines() -> None:
    found = []
    for m, path in MODULES.items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            found.append((m, str(n)))
    bad = [f for f in found if ("lines", f[0]) not in ALLOWED]
    assert not bad, f"modules over {MAX_LINES} lines: {bad}"


MAX_ROOT_MODULES = 12


def test_the_root_shows_the_package_face() -> None:
    """At most MAX_ROOT_MODULES modules stand directly in loadgen/ (``__init__.py`` aside): the floors
    are folders (docs/architecture.md), so ``ls loadgen/`` shows them."""
    root = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_allow_list_has_no_stale_entries() -> None:
    """An entry that no longer matches a violation must be removed (the list only shrinks)."""
    stale = []
    for entry in ALLOWED:
        rule, mod = entry[0], entry[1]
        if mod not in MODULES:
            stale.append(entry)
        elif rule == "upward" and entry[2] not in GRAPH[mod]:
            stale.append(entry)
        elif rule == "lines" and len(MODULES[mod].read_text(encoding="utf-8").splitlines()) <= MAX_LINES:
            stale.append(entry)
    assert not stale, f"remove from ALLOWED: {stale}"


def test_each_check_finds_a_planted_violation() -> None:
    """The checks are not vacuous: each one finds what it forbids in a small made-up house."""
    assert circles({"loadgen.a": {"loadgen.b"}, "loadgen.b": {"loadgen.c"}, "loadgen.c": {"loadgen.a"}}) == [
        ("loadgen.a", "loadgen.b", "loadgen.c")
    ]
    assert circles({"loadgen.a": {"loadgen.b"}, "loadgen.b": set()}) == []
    assert upward({"loadgen.engine.runner": {"loadgen.measurement"}}) == [
        ("loadgen.engine.runner", "loadgen.measurement")
    ]
    assert upward({"loadgen.measurement": {"loadgen.engine.runner"}}) == []
    assert into_top_or_leaf({"loadgen.check": {"loadgen.cli.run"}, "loadgen.cli.run": {"loadgen.locust.dispatch"}}) == [
        ("cli", "loadgen.check", "loadgen.cli.run"),
        ("locust", "loadgen.cli.run", "loadgen.locust.dispatch"),
    ]
    assert socket_openers(
        {
            "loadgen.engine.results": "import aiohttp\n",
            "loadgen.endpoints.http": "import aiohttp\n",
            "loadgen.core.conditions": "host = socket.gethostname()\n",
            "loadgen.engine.runner": "s = socket.socket(af)\n",
        }
    ) == [("loadgen.engine.results",), ("loadgen.engine.runner",)]
    assert concrete_endpoint_users(
        {"loadgen.spread.workers": {"loadgen.endpoints.openai", "loadgen.endpoints.base"}}
    ) == [("loadgen.spread.workers", "loadgen.endpoints.openai")]
