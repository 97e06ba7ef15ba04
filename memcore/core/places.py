"""Where things are: the vault a command means, its config files, its state folder, and a
fingerprint of everything settings are read from.

Kept apart from settings.py (and free of its dataclasses) so that a one-shot command asking a
running daemon can find the vault and tell whether the daemon was configured exactly as the
command would be, at the cost of a few stat calls: see ``config_inputs``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from memcore.core.errors import ConfigError, VaultNotFound

VAULT_CONFIG = "memcore.toml"
# What makes a folder a vault, as .git makes a repository.
VAULT_MARKERS = (VAULT_CONFIG, ".memcore", "MEMORY.md", "memory.md")
# MEMCORE_* variables that are not settings (the rest are, and are checked by settings.py)
ENV_SPECIAL = frozenset(
    {"MEMCORE_VAULT", "MEMCORE_CONFIG", "MEMCORE_TOKEN", "MEMCORE_SCOPED_TOKENS"}
)


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CONFIG_HOME, else ~/.config (where user config and service units live)."""
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()).expanduser() / ".config"


def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get("MEMCORE_CONFIG"):
        path = Path(env["MEMCORE_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"MEMCORE_CONFIG names {path}, which is not a file")
        return path
    return user_config_dir(env) / "memcore" / "config.toml"


def user_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CACHE_HOME, else ~/.cache."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def find_vault(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding a vault marker, or None."""
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in VAULT_MARKERS):
            return folder
    return None


def resolve_vault(flag: str | Path | None, env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """The vault: ``flag``, else $MEMCORE_VAULT (either must be a folder), else the nearest
    folder at or above the current one with memcore.toml, .memcore/ or MEMORY.md.
    Raises VaultNotFound."""
    raw = flag or env.get("MEMCORE_VAULT")
    if raw:
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            raise VaultNotFound(f"vault folder {path} does not exist")
        if not path.is_dir():
            raise VaultNotFound(f"{path} is a file, not a vault folder")
        return path
    here = (cwd or Path.cwd()).resolve()
    found = find_vault(here)
    if found is None:
        raise VaultNotFound(
            f"no vault in {here} or any folder above it (none has memcore.toml, .memcore/ or "
            "MEMORY.md); run `memcore init` or pass --vault DIR"
        )
    return found


def nodes_dir_of(vault: Path, env: Mapping[str, str] = os.environ) -> Path:
    """Where the nodes of a vault whose index is shared (PostgreSQL) keep their lock, status
    and socket on this machine, a folder each: outside the vault, so that nothing in a vault
    on shared storage (NFS, SMB) must be local to be correct, and apart per process, so that
    several nodes on one machine never meet. $XDG_RUNTIME_DIR/memcore, else the temp folder."""
    import hashlib
    import tempfile

    runtime = env.get("XDG_RUNTIME_DIR")
    root = (
        Path(runtime) / "memcore"
        if runtime
        else Path(tempfile.gettempdir()) / (f"memcore-{os.getuid()}")
    )
    digest = hashlib.sha256(str(vault.resolve()).encode()).hexdigest()[:16]
    return root / "nodes" / digest


def state_dir_of(vault: Path) -> Path:
    """``<vault>/.memcore`` (the index, the daemon's lock, socket and log). A vault memcore
    cannot write to (a read-only checkout or mount) keeps them in the user's cache folder
    instead, so it can still be indexed and searched."""
    local = vault / ".memcore"
    if os.access(local if local.is_dir() else vault, os.W_OK):
        return local
    import hashlib  # only for a read-only vault: a one-shot command skips the import

    cache = user_cache_dir()
    digest = hashlib.sha256(str(vault.resolve()).encode()).hexdigest()[:16]
    return cache / "memcore" / f"{vault.name[:40]}-{digest}"


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dir(path: Path) -> None:
    """Create a state folder only its owner can enter (0700; an existing one of this user is
    made so too): the index, the daemon's status, socket and logs hold memories and paths that
    other users of the machine must not read."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o777 != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)


def open_private(path: Path, flags: int) -> int:
    """``os.open`` creating the file 0600 (the umask may only take more away)."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_FILE)


def _stamp(path: Path) -> list[int] | None:
    """A file's identity and version as far as a stat tells (None: no such file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def inputs_digest(inputs: Mapping[str, object]) -> str:
    """A digest of ``config_inputs``: what a daemon publishes in its status file, so that a
    command can tell it was configured alike without the file holding any setting's value
    (MEMCORE_* variables may carry a database password)."""
    import hashlib

    canonical = json.dumps(inputs, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(canonical).hexdigest()


def config_inputs(
    vault: Path,
    env: Mapping[str, str],
    overrides: Mapping[str, object] | None = None,
    cwd: str | None = None,
) -> dict[str, object]:
    """Everything ``load_settings`` reads, as plain JSON: the vault, the user config and the
    vault's memcore.toml (path and stat), the MEMCORE_* setting variables and the command
    line's overrides. Two processes with equal inputs have equal settings. ``cwd`` is part of
    it only where settings depend on it (a relative ``storage.db``). Raises ConfigError as
    load_settings does for a MEMCORE_CONFIG that names no file."""
    user_file = user_config_path(env)
    return {
        "vault": str(vault),
        "user_config": [str(user_file), _stamp(user_file)],
        "vault_config": _stamp(vault / VAULT_CONFIG),
        "env": sorted(
            [k, v] for k, v in env.items() if k.startswith("MEMCORE_") and k not in ENV_SPECIAL
        ),
        "overrides": sorted([k, str(v)] for k, v in (overrides or {}).items() if v is not None),
        "cwd": cwd,
    }
