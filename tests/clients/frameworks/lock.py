"""Write (or refresh) one of the pinned environments the framework tests install:
``python tests/clients/frameworks/lock.py NAME``. It installs the folder's ``NAME.in`` into a
throwaway virtualenv made with pip.txt's pip, then pins every package it got, with its hashes,
in ``NAME.txt`` (tests/test_mem0_frameworks.py installs that with --require-hashes on first
use)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent


def wanted_extras(wanted: Path, got: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The extras asked of each package, by the .in file or by a package that is installed:
    --require-hashes wants a package asked with an extra pinned with that extra."""
    asks = [Requirement(line) for line in wanted.read_text().splitlines() if line[:1].isalpha()]
    for item in got:
        for text in item["metadata"].get("requires_dist", []):
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                asks.append(req)
    extras: dict[str, set[str]] = {}
    for req in asks:
        extras.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    return extras


def lock(name: str) -> None:
    wanted = HERE / f"{name}.in"
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "-q", "--require-hashes", "-r", str(HERE / "pip.txt")],
                       check=True)  # fmt: skip
        subprocess.run([*pip, "install", "-q", "-r", str(wanted)], check=True)
        frozen = subprocess.run(
            [*pip, "freeze", "--all", "--exclude", "pip"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        pins = Path(tmp) / "frozen.txt"
        pins.write_text(frozen)
        report = Path(tmp) / "report.json"
        subprocess.run(
            [*pip, "install", "-q", "--dry-run", "--ignore-installed", "--no-deps",
             "--report", str(report), "-r", str(pins)],
            check=True,
        )  # fmt: skip
        got = json.loads(report.read_text())["install"]
    extras = wanted_extras(wanted, got)
    lines = [line for line in wanted.read_text().splitlines() if line.startswith("#")]
    lines.append(f"# Pinned by tests/clients/frameworks/lock.py from {name}.in; do not edit.")
    for item in sorted(got, key=lambda i: i["metadata"]["name"].lower()):
        meta, archive = item["metadata"], item["download_info"]["archive_info"]
        digest = archive["hashes"]["sha256"] if "hashes" in archive else archive["hash"][7:]
        asked = extras.get(canonicalize_name(meta["name"]))
        extra = f"[{','.join(sorted(asked))}]" if asked else ""
        lines.append(f"{meta['name']}{extra}=={meta['version']} --hash=sha256:{digest}")
    (HERE / f"{name}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    lock(sys.argv[1])
