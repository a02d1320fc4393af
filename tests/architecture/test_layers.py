"""The layer rule, whole, and no import circle anywhere.

Every import of every module is followed, those inside functions too (not
those under `if TYPE_CHECKING:`, which never run). A module's layer is its
folder; each layer may import only the layers listed in `MAY_IMPORT`, and no
module can reach itself through imports. `capscope` itself (app/__init__.py,
the version) imports nothing and anyone may import it. Two modules are short re-exports
kept so that old entry points still work (`RE_EXPORTS`); they are the only
exceptions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# folder in the repository -> import name (pyproject's package-dir)
FOLDERS = {"metrics": "capscope.metrics", "db": "capscope.db", "annotation": "capscope.annotation", "app": "capscope"}
TOP_LEVEL = {"metrics", "db", "annotation", "static"}  # the concerns kept at the top; every other package is app/X
# every layer may import `common` (errors, limits, JSONL, paths, checksums, LRU, statistics): it imports nothing
MAY_IMPORT = {
    "common": set(),
    "metrics": set(),
    "db": set(),
    "annotation": {"db", "metrics"},
    "demo": {"metrics"},
    "bench": {"metrics", "demo"},
    "train": {"metrics", "demo", "bench"},
    "batch": {"metrics"},
    "server": {"metrics", "db", "annotation", "demo", "bench", "train", "batch"},
    "ui": {"metrics", "db", "annotation", "demo", "bench", "train", "batch", "server", "pictures", "diagnose"},
    "studies": {"metrics", "db", "annotation", "demo", "bench", "train", "batch", "pictures", "diagnose"},
    "pictures": set(),
    "diagnose": {"metrics", "batch", "pictures"},
    "commands": {"metrics", "db", "annotation", "demo", "bench", "train", "batch", "server", "ui", "studies",
                 "diagnose"},
    "cli": {"metrics", "commands"},
    "capscope": set(),  # app/__init__.py: the version, imported by anyone
    "static": set(),
}
RE_EXPORTS = {  # module -> the one module it re-exports (its old home kept as an entry point)
    "capscope.metrics.errors": "capscope.common.errors",
    "capscope.bench.browser_latency": "capscope.ui.browser_latency",
    "capscope.label_efficiency": "capscope.studies.label_efficiency",
}


def module_files() -> dict[str, Path]:
    """Every module of capscope by its import name."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


MODULES = module_files()


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[1:2] and parts[1] in MAY_IMPORT and parts[1] != "capscope":
        return parts[1]
    return "capscope"


def running_tree(path: Path) -> ast.AST:
    """The file's syntax tree without its `if TYPE_CHECKING:` blocks."""
    class Drop(ast.NodeTransformer):
        def visit_If(self, node):
            if ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                return node.orelse or None
            return self.generic_visit(node)

    return Drop().visit(ast.parse(path.read_text(encoding="utf-8")))


def imports_of(module: str) -> set[str]:
    """The capscope modules `module` imports, anywhere in its file."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(running_tree(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_folder_is_a_known_layer():
    assert {layer(m) for m in MODULES} <= set(MAY_IMPORT)
    assert {"capscope.server.api", "capscope.ui.page", "capscope.batch.pipeline", "capscope.commands.score",
            "capscope.train.finetune", "capscope.studies.label_efficiency"} <= set(MODULES)


def wrong_imports(graph: dict[str, set[str]], source_layer: str) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in graph.items() if layer(module) == source_layer
                  for target in targets
                  if layer(target) not in (source_layer, "capscope", "common")
                  and layer(target) not in MAY_IMPORT[source_layer] and RE_EXPORTS.get(module) != target)


@pytest.mark.parametrize("source_layer", sorted(MAY_IMPORT))
def test_each_layer_imports_only_the_layers_below_it(source_layer):
    assert wrong_imports(GRAPH, source_layer) == []


def test_only_the_cli_and_commands_import_commands():
    wrong = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() for t in targets
                   if layer(t) == "commands" and layer(m) not in ("commands", "cli"))
    assert wrong == []


def test_the_re_exports_are_short_and_import_only_their_new_home():
    for module, target in RE_EXPORTS.items():
        assert GRAPH[module] == {target}, module
        assert len(MODULES[module].read_text(encoding="utf-8").splitlines()) <= 12, module


def test_no_module_reaches_itself_through_imports():
    """Tarjan's strongly connected components over the whole import graph:
    every component must be a single module."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert circles == []


def test_a_layer_violation_would_be_found():
    """The checks above can fail: a metrics module importing db is caught."""
    graph = {**GRAPH, "capscope.metrics.scorer": GRAPH["capscope.metrics.scorer"] | {"capscope.db.store"}}
    assert wrong_imports(graph, "metrics") == ["capscope.metrics.scorer imports capscope.db.store"]
    graph = {**GRAPH, "capscope.common.jsonl": GRAPH["capscope.common.jsonl"] | {"capscope.metrics.text"}}
    assert wrong_imports(graph, "common") == ["capscope.common.jsonl imports capscope.metrics.text"]


def test_capscope_x_is_app_x_unless_x_is_a_top_level_concern():
    """One rule for where a package lives, in the files and in pyproject's package-dir."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setup["package-dir"] == {"capscope": "app", **{f"capscope.{name}": name for name in sorted(TOP_LEVEL)}}
    code_folders = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert code_folders == TOP_LEVEL | {"app"} - {"static"} or code_folders == TOP_LEVEL | {"app"}
    for package in setup["packages"]:
        parts = package.split(".")
        folder = ROOT / (parts[1] if parts[1:2] and parts[1] in TOP_LEVEL else "app") / \
            "/".join(parts[2:] if parts[1:2] and parts[1] in TOP_LEVEL else parts[1:])
        assert (folder / "__init__.py").is_file(), package
    listed = set(setup["packages"])
    on_disk = {".".join(["capscope", *p.parent.relative_to(ROOT / "app").parts]) for p in (ROOT / "app").rglob("__init__.py")}
    assert on_disk - listed == set()  # every package folder is installed
    copied = {line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")}
    assert TOP_LEVEL | {"app"} <= copied  # and goes into the image


def test_no_two_modules_share_a_file_name():
    """A file name says what is in it; the re-exports kept as old entry points are the exceptions."""
    names: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if path.name != "__init__.py" and module not in RE_EXPORTS and ".migrations." not in module:
            names.setdefault(path.name, []).append(module)
    shared = {name: modules for name, modules in names.items() if len(modules) > 1}
    assert shared == {}


TABS = {"capscope.ui.inspect", "capscope.ui.annotate", "capscope.ui.explore", "capscope.ui.benchmark",
        "capscope.ui.admin", "capscope.ui.compare", "capscope.ui.reviewing"}


def test_tabs_share_through_ui_modules_of_their_own_not_through_each_other():
    """Only the page puts the tabs together; what two tabs share lives in a module that is no tab."""
    assert TABS <= set(MODULES)
    crossing = sorted(f"{m} imports {t}" for m in TABS for t in GRAPH[m] if t in TABS)
    assert crossing == []
    assert {m for m, targets in GRAPH.items() if targets & TABS} <= {"capscope.ui.page", "capscope.ui.browser_latency",
                                                                     "capscope.bench.browser_latency"}
