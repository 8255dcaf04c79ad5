"""`pip install` into a venv, done by uv where uv can stand in for pip: the Makefile's installs.

    python tools/install.py --uv UV_VENV VENV PIP-INSTALL-ARGUMENTS...

uv installs the same versions as pip here (compared package by package for the main and Colab venvs) in a third of
the time: the main venv 34 s against 90, Colab's 36 against 97, on 2 cores (docs/testing.md, "Installs by uv"). It
resolves in Rust and byte-compiles on every core, where pip compiles one file after another.

uv reads no pip configuration, so the settings pip would use (`pip config list`: pip.conf files and PIP_* variables)
are handed to it as its own options. Where a setting has no counterpart here, where UV_VENV holds no uv, or where uv
fails, pip installs, as it always did, and one line says why. KWNB_INSTALLER=pip always uses pip.
Standard library only: it runs before any venv has its packages.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

# pip setting: uv's option, given once per value (pip separates several values by whitespace)
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "constraint": "--constraint"}
FLAGS = {"no-index": "--no-index"}
VARIABLES = {"cert": "SSL_CERT_FILE", "timeout": "UV_HTTP_TIMEOUT", "default-timeout": "UV_HTTP_TIMEOUT"}
# Settings that change how pip talks or caches, not what it installs.
IGNORED = {"disable-pip-version-check", "no-input", "quiet", "verbose", "progress-bar", "no-color",
           "root-user-action", "no-warn-script-location", "cache-dir", "no-cache-dir", "retries", "require-virtualenv"}
SECTIONS = ("global", "install", ":env:")  # what `pip install` reads, lowest precedence first
# Like pip across its indexes: the best version on any of them, not the first index that has the package.
UV_INSTALL = ("pip", "install", "--compile-bytecode", "--index-strategy", "unsafe-best-match")


def pip_settings(python: Path) -> dict[str, str]:
    """What `pip install` would read here, as `pip config list` prints it, the stronger section winning."""
    listed = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    found: dict[tuple[str, str], str] = {}
    for line in listed.stdout.splitlines():
        match = re.fullmatch(r"(?P<section>:env:|[^.=]+)\.(?P<key>[^=]+)=(?P<value>.*)", line.strip())
        if match and match["section"] in SECTIONS:
            found[match["section"], match["key"]] = ast.literal_eval(match["value"])
    return {key: value for section in SECTIONS for (where, key), value in found.items() if where == section}


def uv_command(settings: dict[str, str]) -> tuple[list[str], dict[str, str]] | str:
    """uv's options and variables for pip's settings, or the first setting that has none here."""
    options, variables = [], {}
    for key, value in settings.items():
        if key in OPTIONS:
            options += [part for each in value.split() for part in (OPTIONS[key], each)]
        elif key in FLAGS:
            options += [FLAGS[key]] if value.lower() in ("1", "true", "yes", "on") else []
        elif key in VARIABLES:
            variables[VARIABLES[key]] = value
        elif key not in IGNORED:
            return key
    return options, variables


def install_with_pip(venv: Path, arguments: list[str]) -> int:
    python = venv / "bin" / "python"
    if subprocess.run([str(python), "-c", "import pip"], capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    return subprocess.run([str(python), "-m", "pip", "install", *arguments]).returncode


def uv_plan(uv_venv: Path) -> tuple[list[str], dict[str, str]] | str:
    """uv's command before its arguments, and its variables; or why pip installs instead."""
    uv = uv_venv / "bin" / "uv"
    if os.environ.get("KWNB_INSTALLER") == "pip":
        return ""  # asked for: nothing to say
    if not uv.exists():
        return f"no uv in {uv_venv}"
    try:
        translated = uv_command(pip_settings(uv_venv / "bin" / "python"))
    except (OSError, subprocess.CalledProcessError) as failed:
        return f"pip's settings could not be read ({failed})"
    if isinstance(translated, str):
        return f"pip's setting {translated!r} has no uv option here"
    options, variables = translated
    return [str(uv), *UV_INSTALL, *options], variables


def install(uv_venv: Path, venv: Path, arguments: list[str]) -> int:
    plan = uv_plan(uv_venv)
    if not isinstance(plan, str):
        command, variables = plan
        done = subprocess.run([*command, "--python", str(venv / "bin" / "python"), *arguments],
                              env={**os.environ, **variables}).returncode
        if done == 0:
            return 0
        plan = f"uv failed (exit {done})"
    if plan:
        print(f"install: {plan}, so pip installs into {venv}", file=sys.stderr)
    return install_with_pip(venv, arguments)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--uv":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return install(Path(argv[1]), Path(argv[2]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
