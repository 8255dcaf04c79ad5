"""The backends' index: options listed without importing a backend, and backends from other
packages found through the entry-point group `kwnb.backends` (as ipyparallel finds launchers)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DECLARATION = """
from kwnb.backends.catalog import Backend
BACKEND = Backend("fake_kwnb_launcher:FakeLauncher",
                  ((("--fake-flag",), dict(default=None, help="a fake backend's own option")),))
"""
LAUNCHER = """
from kwnb.backends.base import Launcher
class FakeLauncher(Launcher):
    name = "fake"
    def __init__(self, fake_flag=None):
        self.fake_flag = fake_flag
    def addresses(self, tasks):
        return None
    def start(self, launch):
        raise NotImplementedError
"""
PROBE = """
import json, sys
import kwnb.options as options
from kwnb.backends import make_launcher
from kwnb.errors import OptionError
flags = [args[-1] for args, kwargs in options.LAUNCH_ARGUMENTS]
choices = next(kwargs["choices"] for args, kwargs in options.LAUNCH_ARGUMENTS if args == ("--backend",))
imported_to_list = sorted(m for m in sys.modules if m in ("fake_kwnb_launcher", "kwnb.backends.local",
                                                          "kwnb.backends.slurm", "kwnb.backends.warm",
                                                          "kwnb.backends.ray"))
launcher = make_launcher("fake", fake_flag="on")
try:
    make_launcher("local", fake_flag="on")
    refused = ""
except OptionError as error:
    refused = str(error)
print(json.dumps({"flags": flags, "choices": list(choices), "imported_to_list": imported_to_list,
                  "made": [type(launcher).__name__, launcher.fake_flag], "refused": refused}))
"""


def test_a_backend_from_another_package_is_found_by_entry_point_and_imported_only_when_used(tmp_path):
    (tmp_path / "fake_kwnb_backend.py").write_text(DECLARATION)
    (tmp_path / "fake_kwnb_launcher.py").write_text(LAUNCHER)
    info = tmp_path / "fake_kwnb_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-kwnb-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kwnb.backends]\nfake = fake_kwnb_backend:BACKEND\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{tmp_path}"}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["choices"] == ["local", "slurm", "ray", "fake"]
    assert {"--network", "--partition", "--address", "--spread", "--fake-flag"} <= set(found["flags"])
    assert found["imported_to_list"] == [], "listing options imported a backend"
    assert found["made"] == ["FakeLauncher", "on"]
    assert found["refused"] == "--fake-flag only apply with --backend fake"


def test_load_ext_imports_no_backend_module():
    probe = textwrap.dedent("""
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        InteractiveShell.instance().run_line_magic("load_ext", "kwnb")
        print(sorted(m for m in ("kwnb.backends.slurm", "kwnb.backends.local") if m in sys.modules))
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "KWNB_WARM": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
