"""The shape of kwnb/: which way imports go, what each layer may import, and what loads when.

docs/architecture.md draws the layers; these tests keep them true:
- no import cycle between kwnb's modules, type-only (`if TYPE_CHECKING:`) imports included: a type hint
  that reaches back is a dependency all the same;
- the layer rule: a module imports only from its own layer or the ones below it (LAYERS, lowest first),
  type-only imports included;
- only kwnb/notebook/ imports IPython or ipywidgets;
- kwnb/task/ (code that runs inside a task, under any Python) imports only the standard library;
- `kwnb.launch` in a plain Python process imports neither IPython, ipywidgets nor pyplot, and
  `%load_ext kwnb` does not import matplotlib;
- no module but Run's and Task's own touches their underscore attributes (policies and views use
  their public interface).
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kwnb.engine.live import cluster
from kwnb.task import slurm_env

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kwnb"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, typing_too: bool = True) -> list[tuple[str, bool]]:
    """(module imported, whether at module level) for every import, relative ones resolved; those under
    `if TYPE_CHECKING:` only with typing_too (they never run, but they are a dependency all the same)."""
    tree = ast.parse(path.read_text())
    package = module_name(path).split(".") if path.name == "__init__.py" else module_name(path).split(".")[:-1]
    top_level = {id(node) for node in tree.body}
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                   ast.unparse(node.test) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing_too:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found += [(f"{base}.{alias.name}", id(node) in top_level) for alias in node.names]
            found.append((base, id(node) in top_level))
    return found


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def kwnb_imports(name: str, top_level_only: bool = False) -> set[str]:
    return {imported for imported, top in imports_of(MODULES[name])
            if imported in MODULES and imported != name and (top or not top_level_only)}


def test_no_import_cycles():
    graph = {name: kwnb_imports(name) - {"kwnb"} for name in MODULES}

    def reaches(start: str, goal: str) -> list[str] | None:
        stack, seen = [[start]], set()
        while stack:
            path = stack.pop()
            for nxt in graph[path[-1]]:
                if nxt == goal:
                    return path + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(path + [nxt])
        return None

    cycles = [" -> ".join(cycle) for name in graph if (cycle := reaches(name, name))]
    assert not cycles, cycles


def test_the_checks_see_imports():
    """The graph the cycle test walks is not empty: it finds imports known to be there, type-only ones too."""
    assert "kwnb.engine.tasks.task" in kwnb_imports("kwnb.engine.live.run_engine")
    assert "kwnb.task.runfolder" in kwnb_imports("kwnb.task.report")
    assert ("IPython.core.magic.Magics", True) in imports_of(MODULES["kwnb.notebook.magics"])
    probe = PACKAGE.parent / "tests" / "data" / "layout_probe.py"
    assert "kwnb.engine.live.run" in {name for name, _ in imports_of(probe)}
    assert "kwnb.engine.live.run" not in {name for name, _ in imports_of(probe, typing_too=False)}


# The layers, lowest first: a module may import from its own layer and those below, never from above.
# Within the engine each concern is a layer of its own: what a task wrote (readers), one task (tasks), what
# goes wrong (diagnoses), what is kept and shown (records), the running run (live).
LAYERS = (
    ("kwnb.errors", "kwnb.version", "kwnb.python_source"),  # plain definitions everyone shares; one ast.parse
    ("kwnb.task",),                                      # runs inside each task: standard library only
    ("kwnb.machine", "kwnb.datasets"),                   # facts about this machine; sample data
    ("kwnb.backends", "kwnb.export"),                    # ways of starting tasks; a run as Kubernetes objects
    ("kwnb.engine.readers",),
    ("kwnb.engine.tasks",),
    ("kwnb.engine.diagnoses",),
    ("kwnb.engine.records",),
    ("kwnb.engine.live", "kwnb.engine"),
    ("kwnb.pictures",),                                  # drawn from snapshots
    ("kwnb.api", "kwnb.options", "kwnb.doctor", "kwnb.slurm"),
    ("kwnb.notebook", "kwnb.cli", "kwnb.__main__", "kwnb"),  # the views, and the package's lazy entry points
)


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names the module (kwnb.engine.live.run: kwnb.engine.live's)."""
    found = [(len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
             if module == prefix or module.startswith(prefix + ".")]
    assert found, f"{module} is in no layer: add its package to LAYERS"
    return max(found)[1]


def test_every_module_has_a_layer():
    assert sorted({layer_of(name) for name in MODULES}) == list(range(len(LAYERS)))


def test_no_module_imports_from_a_higher_layer():
    upward = [f"{name} (layer {layer_of(name)}) imports {imported} (layer {layer_of(imported)})"
              for name in MODULES for imported in kwnb_imports(name) - {"kwnb"}
              if layer_of(imported) > layer_of(name)]
    assert not upward, upward


def test_the_layer_rule_finds_an_upward_import():
    assert layer_of("kwnb.engine.live.run") > layer_of("kwnb.engine.diagnoses.diagnose") > layer_of("kwnb.machine.limits")
    assert layer_of("kwnb.engine.records.snapshot") < layer_of("kwnb.pictures.plotting") < layer_of("kwnb.notebook.magics")


def test_only_the_notebook_layer_imports_ipython_or_ipywidgets():
    offenders = [f"{name} imports {imported}" for name, path in MODULES.items()
                 if not name.startswith("kwnb.notebook")
                 for imported, _ in imports_of(path) if imported.split(".")[0] in ("IPython", "ipywidgets")]
    assert not offenders, offenders


def test_every_parse_of_a_users_source_is_the_one_serialised_parse():
    """kwnb.python_source.parse holds the lock two parses at once need on CPython 3.11 (its docstring)."""
    calls = [f"{name}:{node.lineno}" for name, path in MODULES.items() if name != "kwnb.python_source"
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "parse"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"]
    assert not calls, f"use kwnb.python_source.parse: {calls}"


def test_task_side_imports_only_the_standard_library():
    """Each module of kwnb/task/, imported by an interpreter without site-packages (-S): kwnb's
    dependencies are not there, so an import of one fails, and what was loaded is listed."""
    task_modules = sorted(name for name in MODULES if name.startswith("kwnb.task"))
    assert "kwnb.task.bootstrap" in task_modules and "kwnb.task.slurm_env" in task_modules
    probe = textwrap.dedent(f"""
        import importlib, json, sys
        sys.path.insert(0, {str(REPO)!r})
        for name in {task_modules!r}:
            importlib.import_module(name)
        tops = {{m.split(".")[0] for m in sys.modules}} - set(sys.stdlib_module_names) - {{"__main__"}}
        print(json.dumps({{"outside": sorted(tops - {{"kwnb"}}), "kwnb": sorted(m for m in sys.modules if "kwnb" in m)}}))
    """)
    result = subprocess.run([sys.executable, "-S", "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["outside"] == []
    assert all(m in ("kwnb", "kwnb.errors", "kwnb.version") or m.startswith("kwnb.task") for m in loaded["kwnb"]), loaded["kwnb"]


@pytest.mark.parametrize("workers, ps", [(1, 0), (2, 0), (3, 0), (2, 1), (4, 2)])
def test_slurm_tasks_build_the_tf_config_the_engine_would(workers, ps):
    """A Slurm task builds its TF_CONFIG on its node; it must equal the engine's for the same addresses."""
    task_ids = cluster.plan_tasks(workers, ps=ps)
    tasks = [{"type": t.type, "index": t.index, "log": f"{t.type}-{t.index}.log"} for t in task_ids]
    nodes = ["n1", "n2"][: 1 + (len(tasks) > 1)]
    per_node = [len(tasks) - len(tasks) // 2, len(tasks) // 2] if len(nodes) == 2 else [len(tasks)]
    addresses = slurm_env.addresses(",".join(nodes), ",".join(map(str, per_node)), 20000)
    expected_cluster = cluster.cluster_spec(task_ids, addresses)
    for procid, task_id in enumerate(task_ids):
        assert slurm_env.tf_config(tasks, procid, addresses) == cluster.tf_config(expected_cluster, task_id)


PLAIN_LAUNCH = """
import sys, kwnb
run = kwnb.launch("job.py", n=2, runs_dir="runs")
assert run.wait(60) == [0, 0], run.summary()
heavy = [m for m in ("IPython", "ipywidgets", "matplotlib.pyplot") if m in sys.modules]
print("heavy:", heavy, "summary:", (run.dir / "summary.txt").is_file())
"""


@pytest.mark.slow
def test_launch_in_plain_python_imports_no_notebook_or_pyplot(tmp_path):
    (tmp_path / "job.py").write_text("import kwnb\nfor epoch in range(2):\n    kwnb.report(epoch=epoch, loss=1.0 / (epoch + 1))\n")
    result = subprocess.run([sys.executable, "-c", PLAIN_LAUNCH], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "heavy: [] summary: True" in result.stdout


def test_load_ext_imports_neither_matplotlib_nor_ipywidgets():
    probe = textwrap.dedent("""
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()  # not IPython's test shell, which imports matplotlib itself
        assert "matplotlib" not in sys.modules
        ip.run_line_magic("load_ext", "kwnb")
        assert "kw_worker" in ip.magics_manager.magics["cell"]
        print(sorted(m for m in ("matplotlib", "ipywidgets") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# The modules that are Run (the learner's and its engine side) and Task: only they touch their private attributes.
OWNERS = ("kwnb.engine.live.run", "kwnb.engine.live.run_engine", "kwnb.engine.live.control",
          "kwnb.engine.records.reading", "kwnb.engine.tasks.task")


def private_names_of_run_and_task() -> set[str]:
    """`self._x` attributes and `_x` methods that Run and Task define (not dunders)."""
    names = set()
    for owner in OWNERS:
        for node in ast.walk(ast.parse(MODULES[owner].read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AnnAssign)) and isinstance(getattr(node, "target", None), ast.Name):
                names.add(node.target.id)
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def own_private_names(tree: ast.AST) -> set[str]:
    """What a module's own classes define as `self._x`: e.g. a dashboard's own `_thread`."""
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "self"} | \
        {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def private_uses(name: str, source: str, private: set[str]) -> list[str]:
    tree = ast.parse(source)
    own = own_private_names(tree)
    return [f"{name} line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in private and node.attr not in own
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]


def test_only_run_and_task_touch_their_private_attributes():
    """A policy, a diagnosis, a view talks to a run through its public interface (GUIDE: "How the code
    should feel"); every module but Run's and Task's own is checked, the engine's others too."""
    private = private_names_of_run_and_task()
    assert {"_engine", "_supervisor", "_env", "_process", "_folder"} <= private  # the check sees them
    offenders = [use for name, path in MODULES.items() if name not in OWNERS
                 for use in private_uses(name, path.read_text(), private)]
    assert not offenders, offenders


def test_the_private_attribute_check_finds_a_use():
    source = "def peek(run, task):\n    engine = run._engine\n    return task._process\n"
    found = private_uses("probe", source, private_names_of_run_and_task())
    assert found == ["probe line 2: run._engine", "probe line 3: task._process"], found


def test_diagnoses_know_no_run():
    """A diagnosis takes values (engine/diagnoses/__init__.py): no module of diagnoses/ imports live/ or records/,
    not even for type hints, and neither tasks/ nor diagnoses/ imports a layer above it."""
    def everything_imported(name: str) -> set[str]:
        tree = ast.parse(MODULES[name].read_text())
        package = name.split(".")[:-1]
        found = set()
        for node in ast.walk(tree):  # type-only imports included
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                found.add(base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        return found

    above = {"kwnb.engine.diagnoses": ("kwnb.engine.live", "kwnb.engine.records"),
             "kwnb.engine.tasks": ("kwnb.engine.diagnoses", "kwnb.engine.live", "kwnb.engine.records")}
    offenders = [f"{name} imports {imported}" for name in MODULES for package, banned in above.items()
                 if name.startswith(package + ".") for imported in everything_imported(name)
                 if imported.startswith(banned)]
    assert not offenders, offenders
