"""No import cycles: a static graph of module-level imports, and every module imported first in its own process.

The static check reads each module of ``rirlab``, ``sweeps`` and ``analysis`` with ``ast`` and follows the
imports that run when the module is imported (module and class bodies; not function bodies, which is where
the CLI puts its heavy and higher-layer imports, nor ``if TYPE_CHECKING:`` blocks). A cycle in that graph is a
cycle whatever the import order. The dynamic check catches what a static read cannot (``importlib`` calls,
``__init__`` side effects): one interpreter imports the third-party packages the project uses, then forks a
child per project module that imports that module before any other project module, so a module that only
works when something else was imported first fails here. The same static read checks the layering (docs/layout.md):
the library never imports sweeps, analysis, ray or mlflow outside the CLI; tasks never import models; analysis
never imports torch; the CLI imports heavy modules only inside its commands.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# dotted package -> its folder: sweeps/ and analysis/ are top-level folders of the checkout that install as
# rirlab.sweeps and rirlab.analysis (setup.cfg's package_dir)
PACKAGES = {"rirlab": "rirlab", "rirlab.sweeps": "sweeps", "rirlab.analysis": "analysis"}


def project_modules() -> dict[str, Path]:
    """Dotted name -> file of every module of PACKAGES (``__main__`` modules excluded: importing them runs them)."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            name = ".".join((pkg, *(parts[:-1] if parts[-1] == "__init__" else parts)))
            out[name] = path
    return out


def _import_time_nodes(body):
    """Import statements that run at import time: descend into if/try/with/class, not into functions."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _import_time_nodes(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _import_time_nodes(getattr(node, field, []) or [])


def imports_of(name: str, path: Path, modules) -> set[str]:
    """Project modules that ``name`` imports at import time."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_time_nodes(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from P import x`: the submodule P.x when x is one, else P itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        found |= {t for t in targets if t in modules and t != name}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def third_party_roots(modules) -> list[str]:
    roots = set()
    for path in modules.values():
        for node in _import_time_nodes(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                roots |= {a.name for a in node.names}
            elif node.module and not node.level:
                roots.add(node.module)
    return sorted(r for r in roots if r.split(".")[0] != "rirlab")


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_static_graph_sees_relative_and_from_imports(tmp_path):
    mods = {"p": tmp_path / "p.py", "p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    mods["p.a"].write_text("from . import b\nimport os\ndef f():\n    import p\n")
    assert imports_of("p.a", mods["p.a"], mods) == {"p.b"}


def test_no_import_cycle_among_module_level_imports():
    found = cycles(import_graph())
    assert not found, "import cycles (module-level imports): " + "; ".join(" <-> ".join(c) for c in found)


def all_imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports anywhere (function bodies too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def full_import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere, function bodies included (a cycle that only closes
    inside a function still ties the two modules together: neither can be understood, moved or tested alone)."""
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in all_imports(path):
            parts = imported.split(".")
            owner = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules),
                         None)
            if owner is not None and owner != name:
                targets.add(owner)
        graph[name] = targets
    return graph


def test_no_import_cycle_even_through_imports_inside_functions():
    found = cycles(full_import_graph())
    assert not found, "import cycles (imports anywhere): " + "; ".join(" <-> ".join(c) for c in found)


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# (modules, except these, must not import) -- docs/layout.md: lower layers never import higher ones
LAYERS = [
    # the library: CLI wiring only (rirlab.compat is the one seam to those libraries' internals, imported lazily)
    (("rirlab",), ("rirlab.cli", "rirlab.sweeps", "rirlab.analysis", "rirlab.compat"),
     ("rirlab.sweeps", "rirlab.analysis", "ray", "mlflow", "optuna")),
    (("rirlab.tasks",), (), ("rirlab.models", "rirlab.train")),  # tasks do not import models
    (("rirlab.analysis",), (), ("torch", "rirlab.models", "rirlab.train", "rirlab.tasks")),  # analysis never imports torch
    # the sweep side (sweeps/__init__.py): spec < plan < tune, record < driver; the sweep never calls analysis
    (("rirlab.sweeps",), (), ("rirlab.analysis", "rirlab.cli")),
    (("rirlab.sweeps.spec",), (), ("rirlab.sweeps.plan", "rirlab.sweeps.tune", "rirlab.sweeps.record", "rirlab.sweeps.driver", "ray", "mlflow",
                            "optuna")),
    (("rirlab.sweeps.plan",), (), ("rirlab.sweeps.tune", "rirlab.sweeps.record", "rirlab.sweeps.driver", "mlflow", "optuna")),
    (("rirlab.sweeps.tune",), (), ("rirlab.sweeps.record", "rirlab.sweeps.driver")),  # (a trial's system metrics: MLflow's sampler)
    (("rirlab.sweeps.record",), (), ("rirlab.sweeps.tune", "rirlab.sweeps.driver")),
    # the spec schema and the trial expansion are what analysis reads: torch-free, registry-free
    (("rirlab.sweeps.spec.schema", "rirlab.sweeps.spec.lines", "rirlab.sweeps.spec.trials"), (),
     ("torch", "rirlab.models", "rirlab.tasks", "rirlab.trial", "rirlab.train")),
    (("rirlab.contract",), (), ("rirlab.config", "rirlab.models", "rirlab.tasks", "torch", "pydantic")),
]


def test_lower_layers_never_import_higher_ones():
    broken = set()
    for name, path in project_modules().items():
        for importers, exempt, forbidden in LAYERS:
            if _under(name, importers) and not _under(name, exempt):
                broken |= {(name, f) for f in forbidden if any(_under(i, (f,)) for i in all_imports(path))}
    assert not broken, sorted(broken)


def test_the_cli_imports_heavy_and_higher_layers_only_inside_commands():
    """`rirlab --help` stays fast and the library stays free of sweeps: no import-time torch/ray/mlflow/sweeps."""
    graph, heavy = import_graph(), ("rirlab.sweeps", "rirlab.analysis", "rirlab.models", "rirlab.train", "rirlab.tasks")
    modules = project_modules()
    for name in (m for m in graph if _under(m, ("rirlab.cli",))):
        assert not {m for m in graph[name] if _under(m, heavy)}, name
        third = {r.split(".")[0] for r in third_party_roots({name: modules[name]})}
        assert not third & {"torch", "ray", "mlflow", "optuna", "pandas"}, (name, third)


CHILD = textwrap.dedent("""
    import importlib, json, os, sys, traceback
    modules, preload = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    for name in preload:  # third-party only: no project module is loaded before a child's own
        try:
            importlib.import_module(name)
        except Exception:
            pass
    assert not [m for m in sys.modules if m.split(".")[0] in ("rirlab", "sweeps", "analysis")]
    failed = {}
    for name in modules:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                importlib.import_module(name)
                code, msg = 0, ""
            except BaseException:
                code, msg = 1, traceback.format_exc(limit=-3)
            os.write(w, msg.encode())
            os._exit(code)
        os.close(w)
        msg = b""
        while chunk := os.read(r, 65536):
            msg += chunk
        os.close(r)
        if os.waitpid(pid, 0)[1]:
            failed[name] = msg.decode()
    print(json.dumps(failed))
""")


def import_each_first(modules, preload, cwd) -> dict[str, str]:
    """Module -> traceback of every module that fails to import when it is the first project module imported."""
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sorted(modules)), json.dumps(preload)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@needs_fork
def test_importing_each_module_first_finds_an_order_dependent_cycle(tmp_path):
    (tmp_path / "rirlab_cyc").mkdir()
    (tmp_path / "rirlab_cyc" / "__init__.py").write_text("")
    (tmp_path / "rirlab_cyc" / "a.py").write_text("from rirlab_cyc.b import B\nA = 1\n")
    (tmp_path / "rirlab_cyc" / "b.py").write_text("B = 1\nfrom rirlab_cyc.a import A\n")  # works if b comes first
    failed = import_each_first(["rirlab_cyc.a", "rirlab_cyc.b"], [], tmp_path)
    assert list(failed) == ["rirlab_cyc.a"] and "partially initialized" in failed["rirlab_cyc.a"]


@needs_fork
def test_every_module_imports_first_in_its_own_process():
    modules = project_modules()
    failed = import_each_first(modules, third_party_roots(modules), REPO)
    assert not failed, "\n".join(f"{name}:\n{err}" for name, err in failed.items())
