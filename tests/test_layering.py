"""The package's layering, read from the source: every import of every module under hyb/
(at module level and inside functions) must go down or sideways in the table below, and no
two modules may import each other, directly or through others.

The test reads the files with the ``ast`` module: an import that runs only on some path (inside
a function, under ``if``) counts the same as one at the top of a file.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hyb"

# Layers, bottom to top: (name, the modules in it, the layers its modules may import).
# A module name stands for itself and everything below it (``hyb.dsl`` is hyb/dsl/*).
LAYERS = [
    ("base", ["hyb.errors", "hyb.version", "hyb.target", "hyb.cachedir"], {"base"}),
    ("front end", ["hyb.dsl"], {"base", "front end"}),
    ("middle end", ["hyb.schedule"], {"base", "front end", "middle end"}),
    ("back ends", ["hyb.codegen"], {"base", "front end", "middle end", "back ends"}),
    ("autodiff", ["hyb.autodiff"], {"base", "front end", "autodiff"}),
    ("runtime", ["hyb.runtime"], {"base", "front end", "middle end", "back ends", "autodiff", "runtime"}),
    ("operator layer", ["hyb.context", "hyb.tape", "hyb.tensor_math", "hyb.tensor", "hyb.autograd", "hyb.dtype",
                        "hyb.nn", "hyb.function", "hyb.ops", "hyb.common", "hyb.torch", "hyb.jax",
                        "hyb.adapters"],
     {"base", "front end", "middle end", "back ends", "autodiff", "runtime", "operator layer"}),
    ("cli", ["hyb.cli"],
     {"base", "front end", "middle end", "back ends", "autodiff", "runtime", "operator layer", "cli"}),
]
# The package root (hyb/__init__.py) re-exports the public API: it may import anything, and
# nothing inside the package may import it.
PACKAGE = "hyb"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve(importer: str, node) -> list:
    """The hyb modules an import statement names (a name imported from a package counts as
    that package unless it is a submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == PACKAGE or a.name.startswith(PACKAGE + ".")]
    if node.level:
        base = importer.split(".")
        if not is_package(importer):
            base = base[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target != PACKAGE and not target.startswith(PACKAGE + "."):
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        out.append(sub if sub in MODULES else target)
    return out


def imports_of(name: str) -> dict:
    """{imported module: first line it is imported on} for one module."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in resolve(name, node):
                while target not in MODULES:  # `import hyb.x.y` of a name that is not a module
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    found.setdefault(target, node.lineno)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str):
    for layer, members, _ in LAYERS:
        if any(name == m or name.startswith(m + ".") for m in members):
            return layer
    return None


ALLOWED = {layer: allowed for layer, _, allowed in LAYERS}


def test_every_module_has_a_layer():
    assert [n for n in MODULES if n != PACKAGE and layer_of(n) is None] == []


def test_no_import_goes_up_a_layer():
    wrong = []
    for name, targets in GRAPH.items():
        if name == PACKAGE:
            continue
        mine = layer_of(name)
        for target, line in targets.items():
            if target == PACKAGE:
                wrong.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line}: {name} imports the package root")
            elif layer_of(target) not in ALLOWED[mine]:
                wrong.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line}: {name} ({mine}) imports "
                             f"{target} ({layer_of(target)})")
    assert wrong == [], "imports against the layering:\n" + "\n".join(wrong)


def find_cycle(graph: dict):
    """One import cycle as a list of modules (first == last), or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt == PACKAGE or nxt not in graph:
                continue
            if nxt in MODULES and is_package(nxt) and node.startswith(nxt + "."):
                continue  # a submodule reading a name its package's __init__ defines before importing it
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    graph = {n: [t for t in targets if not (is_package(n) and t.startswith(n + "."))]
             for n, targets in GRAPH.items()}
    # A package's __init__ importing its own submodules is how it exports them, not a cycle.
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The guard itself: an import inside a function and a relative import two levels up are found."""
    source = "def f():\n    from ..cli import main\n    return main\n"
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert resolve("hyb.runtime.kernel", node) == ["hyb.cli.main"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": []}) is None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_are_sized_for_a_reader(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= 800, f"{MODULES[name].relative_to(ROOT.parent)} has {lines} lines (at most 800)"
