"""The package's imports: no cycles, and each layer imports only what it may (docs/architecture.md).

Imports inside functions count too: a lazy import is still a dependency. So do imports for type
checkers only (``if TYPE_CHECKING:``): a type named in a signature is a dependency of its reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draftgen"

# The stages in the order the data flows (docs/architecture.md): a package may import only the
# packages of a lower rank, so nothing reaches back upstream or sideways (the store knows no
# provider, backends know no model, outputs never start a generation, the CLI only calls the
# library). Ranks 0 and 1 are the shared ground: plain records, errors, redaction, logging, the
# stop signals.
RANKS = {
    "draftgen": 0,
    "draftgen.errors": 0,
    "draftgen.records": 0,
    "draftgen.redact": 0,
    "draftgen.collector": 0,  # pacing Python's cycle collector: the stdlib only
    "draftgen.signals": 0,  # the signals that stop a command, their handlers: the stdlib only
    "draftgen.logs": 1,  # logging redacts: it stands on redact
    # A setting's declaration and its TOML conversion, for the run's options and the simulator's
    # settings: it stands on errors and redact.
    "draftgen.declaration": 1,
    "draftgen.profiles": 1,
    "draftgen.tokens": 2,
    "draftgen.inputs": 2,
    "draftgen.backends": 2,
    "draftgen.store": 3,
    "draftgen.simulator": 3,
    "draftgen.reconstruct": 4,  # reads and writes the store
    "draftgen.generate": 5,  # the engines
    "draftgen.outputs": 5,
    # One declaration per setting: its choices come from the registries below it (backends,
    # profiles, export formats, batch dialects), and everything above it reads the options.
    "draftgen.options": 6,
    "draftgen.run": 7,  # orchestration: drives the engines, the probe, estimate, cancel
    "draftgen.api": 8,
    "draftgen.cli": 9,
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
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
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
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
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


# The CLI parses, calls the library and prints (draftgen.cli.present): everything it does is a
# call a Python user can make too, so it reaches the library only through its front door. Beside
# the API and the options it may use the ground every layer stands on: the package's version,
# its error type, log configuration, redaction of what it prints and the stop signals' handlers.
CLI_MAY_IMPORT = {
    "draftgen",
    "draftgen.signals",
    "draftgen.api",
    "draftgen.options",
    "draftgen.errors",
    "draftgen.logs",
    "draftgen.redact",
}


def test_the_cli_imports_only_the_api_and_the_options():
    problems = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if layer(name) == "draftgen.cli"
        for target in targets
        if layer(target) not in CLI_MAY_IMPORT | {"draftgen.cli"}
    ]
    assert problems == []


# The test scaffolding (offline fixtures, the files they are built from, failpoints) is a package
# of its own beside the product, and nothing in the product imports it, by statement or by name:
# fixture:NAME reaches it through the entry point group draftgen.tokenizer_sources, a failpoint by
# replacing a no-op step in the process the test starts.
TESTING = "draftgen_testing"


def mentions_of_testing(path: Path) -> list[str]:
    """Every import of the test package in ``path``, and every string but a docstring that names
    it (an import by name: ``importlib.import_module``, ``__import__``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documents = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documents) and node.body and isinstance(node.body[0], ast.Expr)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == TESTING]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == TESTING:
            found.append(node.module)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and TESTING in node.value
            and id(node) not in docstrings
        ):
            found.append(repr(node.value))
    return found


def test_the_product_imports_no_test_scaffolding():
    # The check sees an import where there is one: the test package's own modules import it.
    assert mentions_of_testing(PACKAGE.parent / TESTING / "fixtures.py")
    problems = [
        f"{module_name(path)}: {mention}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for mention in mentions_of_testing(path)
    ]
    assert problems == []
