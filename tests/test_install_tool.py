"""tools/install.py: the Makefile's installs, by uv with the settings this machine's pip would use, else by pip."""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV_VENV = ROOT / ".uv"
_spec = importlib.util.spec_from_file_location("install_tool", ROOT / "tools" / "install.py")
install_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_tool)


def test_pips_settings_become_uvs_options_and_variables():
    options, variables = install_tool.uv_command({
        "extra-index-url": "file:///a/simple  https://b.example/simple", "find-links": "/wheels",
        "constraint": "/etc/c.txt", "no-index": "false", "cert": "/etc/ca.crt", "default-timeout": "180",
        "disable-pip-version-check": "1"})
    assert options == ["--extra-index-url", "file:///a/simple", "--extra-index-url", "https://b.example/simple",
                       "--find-links", "/wheels", "--constraint", "/etc/c.txt"]
    assert variables == {"SSL_CERT_FILE": "/etc/ca.crt", "UV_HTTP_TIMEOUT": "180"}
    assert install_tool.uv_command({"no-index": "1"}) == (["--no-index"], {})
    assert install_tool.uv_command({"find-links": "/wheels", "proxy": "http://p:3128"}) == "proxy"


def test_the_install_section_overrides_global_and_a_pip_variable_both(tmp_path, monkeypatch):
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = file:///global/simple\n[install]\nindex-url = file:///install/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))  # read after the machine's own files
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert install_tool.pip_settings(Path(sys.executable))["index-url"] == "file:///install/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "file:///variable/simple")
    assert install_tool.pip_settings(Path(sys.executable))["index-url"] == "file:///variable/simple"


def tiny_wheel(folder: Path) -> None:
    """kwnb_tiny 1.0, a one-module wheel, so that an install needs no index."""
    files = {"kwnb_tiny.py": "VALUE = 1\n",
             "kwnb_tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: kwnb-tiny\nVersion: 1.0\n",
             "kwnb_tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n"}

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n" for path, text in files.items())
    files["kwnb_tiny-1.0.dist-info/RECORD"] = record + "kwnb_tiny-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / "kwnb_tiny-1.0-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def installed_by(venv: Path) -> str:
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, kwnb_tiny; "
                            "print(kwnb_tiny.VALUE, m.distribution('kwnb-tiny').read_text('INSTALLER').strip())"],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    value, installer = found.stdout.split()
    assert value == "1"
    return installer


@pytest.mark.skipif(not (UV_VENV / "bin" / "uv").exists(), reason="no .uv/bin/uv: `make setup` installs it")
def test_uv_installs_and_pip_does_where_a_setting_has_no_uv_option_or_none_can_be_read(tmp_path, monkeypatch, capfd):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tiny_wheel(wheels)
    arguments = ["--quiet", "--no-index", "--find-links", str(wheels), "kwnb-tiny"]
    for name in ("by-uv", "by-pip", "unread"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / name)], check=True)
    assert install_tool.main(["--uv", str(UV_VENV), str(tmp_path / "by-uv"), *arguments]) == 0
    assert installed_by(tmp_path / "by-uv") == "uv"
    assert "pip installs" not in capfd.readouterr().err
    monkeypatch.setenv("PIP_PREFER_BINARY", "1")  # a pip setting with no uv option in tools/install.py
    assert install_tool.main(["--uv", str(UV_VENV), str(tmp_path / "by-pip"), *arguments]) == 0
    assert installed_by(tmp_path / "by-pip") == "pip"
    assert "pip's setting 'prefer-binary' has no uv option here, so pip installs" in capfd.readouterr().err
    broken = tmp_path / "uv-without-python"  # a uv, but no Python to ask `pip config list`
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "uv").symlink_to(UV_VENV / "bin" / "uv")
    monkeypatch.delenv("PIP_PREFER_BINARY")
    assert install_tool.main(["--uv", str(broken), str(tmp_path / "unread"), *arguments]) == 0
    assert installed_by(tmp_path / "unread") == "pip"
    assert "pip's settings could not be read" in capfd.readouterr().err
