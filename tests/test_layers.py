"""The package's imports: no cycles, and each layer imports only what it may (docs/architecture.md).

Imports inside functions count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draftgen"

# The stages in the order the data flows (docs/architecture.md): a package may import only the
# packages of a lower rank, so nothing reaches back upstream or sideways (the store knows no
# provider, backends know no model, outputs never start a generation, the CLI only calls the
# library). Ranks 0 and 1 are the shared ground: plain records, errors, redaction, logging.
RANKS = {
    "draftgen": 0,
    "draftgen.errors": 0,
    "draftgen.records": 0,
    "draftgen.redact": 0,
    "draftgen.collector": 0,  # pacing Python's cycle collector: the stdlib only
    "draftgen.logs": 1,  # logging redacts: it stands on redact
    "draftgen.profiles": 1,
    "draftgen.tokens": 2,
    "draftgen.inputs": 2,
    "draftgen.backends": 2,
    "draftgen.store": 3,
    "draftgen.simulator": 3,
    "draftgen.reconstruct": 4,  # reads and writes the store
    "draftgen.generate": 5,  # the engines
    "draftgen.outputs": 5,
    "draftgen.run": 6,  # orchestration: drives the engines, the probe, estimate, cancel
    "draftgen.api": 7,
    "draftgen.cli": 8,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names imported from it) of every draftgen import; names empty for ``import x``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    # Imports for type checkers only are no dependency at run time.
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            found.append((base, tuple(alias.name for alias in node.names)))
    return [(base, names) for base, names in found if base.startswith("draftgen")]


def graph() -> dict[str, set[str]]:
    modules = {
        module_name(path): path
        for path in PACKAGE.rglob("*.py")
        if "fixture_code" not in path.parts  # files shipped into fixtures, not imported
    }
    edges = {}
    for name, path in modules.items():
        targets = set()
        for base, names in imports_of(path):
            # "from draftgen.x import y" depends on the module x.y if there is one, else on x.
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            targets.update(submodules)
            if len(submodules) < len(names) or not names:
                targets.add(base)
        edges[name] = {t for t in targets if t in modules and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def is_package_init(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


def test_no_import_cycles():
    edges = graph()
    # A package's __init__ re-exporting its own modules is not a cycle of design.
    for name in edges:
        if is_package_init(name):
            edges[name] = {t for t in edges[name] if not t.startswith(name + ".")}
    assert cycles(edges) == []


def layer(module: str) -> str:
    """The entry of RANKS a module belongs to: its package, or itself at the top."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_every_module_has_a_layer():
    assert sorted({layer(name) for name in graph()} - set(RANKS)) == []


def test_layers_import_only_what_they_may():
    problems = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if layer(target) != layer(name)
        and layer(target) != "draftgen"
        and RANKS[layer(target)] >= RANKS[layer(name)]
    ]
    assert problems == []
