"""The benchmarks' hooks into kwnb's internals (benchmarks/hooks.py) still reach something: each
module imports and each attribute exists, so a name kwnb moves fails here, not 45 minutes into
`make bench`, or never (a constant set under an old name is simply added, and the default measured)."""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks import firstcell, hooks, kernel, logpath, profile, rerun
from benchmarks.hooks import BUSY_SHARE, DASHBOARD_REFRESH, HOOKS, Hook, owner_of, patched

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def assigned_on_self(cls: type) -> set[str]:
    """Attributes a class's own methods set on `self` (instance attributes, which the class lacks)."""
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("kwnb"):
            for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                        and isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
    return names


def reaches(hook: Hook) -> bool:
    owner = owner_of(hook)  # raises if the module or the owner moved
    return hasattr(owner, hook.name) or (isinstance(owner, type) and hook.name in assigned_on_self(owner))


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook.path)
def test_each_hook_reaches_a_name_kwnb_has(hook):
    assert reaches(hook), f"{hook.path} (used by benchmarks/{', '.join(hook.used_by)}) is gone: {hook.why}"


def test_a_moved_name_is_caught():
    assert not reaches(Hook("kwnb.engine.live.run", "Run._no_such_method", ("profile",), "probe"))
    assert not reaches(Hook("kwnb.engine.tasks.task", "Task.no_such_attribute", ("kernel",), "probe"))
    with pytest.raises(ModuleNotFoundError):
        reaches(Hook("kwnb.engine.run", "Run._supervise", ("profile",), "the path before 8b21208"))


def test_each_hook_is_used_where_the_table_says():
    constants = {hook: name for name, hook in vars(hooks).items() if isinstance(hook, Hook)}
    assert set(HOOKS) <= set(constants) and len(set(HOOKS)) == len(HOOKS)
    for hook in HOOKS:
        for user in hook.used_by:
            source = (BENCHMARKS / f"{user}.py").read_text()
            assert hook.name in source or constants[hook] in source, f"{hook.path} is not in benchmarks/{user}.py"


def test_patched_refuses_a_name_kwnb_no_longer_has():
    gone = Hook(BUSY_SHARE.module, "NO_SUCH_SHARE", ("firstcell",), "probe")
    with pytest.raises(AttributeError):
        with patched(gone, 1.0):
            pass
    assert not hasattr(owner_of(gone), "NO_SUCH_SHARE")


def test_the_quiet_check_cells_set_the_hooked_constant():
    warm_room = owner_of(BUSY_SHARE)
    default = warm_room.BUSY_SHARE
    try:
        exec(firstcell.QUIET_CHECK_OFF, {})
        assert warm_room.BUSY_SHARE == float("inf")
        warm_room.BUSY_SHARE = default
        namespace = {"_bench": {}, "os": __import__("os")}
        exec(rerun.QUIET_CHECK_OFF, namespace)
        assert warm_room.BUSY_SHARE == float("inf") and namespace["_bench"]["busy_share"] == default
    finally:
        warm_room.BUSY_SHARE = default
    with patched(BUSY_SHARE, 2.0):
        assert warm_room.BUSY_SHARE == 2.0
    assert warm_room.BUSY_SHARE == default


def test_the_kernel_wrappers_wrap_and_unwrap_every_hooked_function():
    classes = {hook.path: getattr(owner_of(hook), hook.name) for hook, _ in profile.KERNEL_FUNCTIONS}
    namespace = {"time": time, "json": json}
    exec(profile.KERNEL_HOOK % (profile.WRAPPED,), namespace)
    try:
        wrapped = {hook.path: getattr(owner_of(hook), hook.name) for hook, _ in profile.KERNEL_FUNCTIONS}
        assert all(wrapped[path] is not original for path, original in classes.items())
    finally:
        exec(profile.KERNEL_UNHOOK, namespace)
    assert all(getattr(owner_of(hook), hook.name) is classes[hook.path] for hook, _ in profile.KERNEL_FUNCTIONS)

    refresh = getattr(owner_of(DASHBOARD_REFRESH), DASHBOARD_REFRESH.name)
    exec(logpath.LATENCY_HOOK, namespace)
    try:
        assert getattr(owner_of(DASHBOARD_REFRESH), DASHBOARD_REFRESH.name) is not refresh
    finally:
        exec(logpath.LATENCY_UNHOOK, namespace)
    assert getattr(owner_of(DASHBOARD_REFRESH), DASHBOARD_REFRESH.name) is refresh


def test_the_kernel_cells_built_from_the_table_compile():
    cells = [kernel.KWNB_LAUNCH.format(script="s.py", n=2, name="x", runs="r", args=[], **kernel.HOOKED),
             kernel.KWNB_WAIT.format(timeout=5, **kernel.HOOKED), firstcell.POOL_PIDS, rerun.KERNEL_AFTER,
             firstcell.CELL.format(line="main.py -n 2", source="pass"), rerun.KERNEL_ENV_ON, rerun.KERNEL_ENV_BACK]
    for cell in cells:
        compile(cell, "<cell>", "exec")
    importlib.import_module(kernel.HOOKED["settle"].rpartition(".")[0])
