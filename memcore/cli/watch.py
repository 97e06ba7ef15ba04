"""Commands for the daemon: watch, and service install (systemd user unit / launchd agent)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from xml.sax.saxutils import escape as xml_escape

import typer

from memcore.cli.app import app, fail, run, settings_of
from memcore.compose import ensure_state_dir, open_service
from memcore.core.places import open_private, user_config_dir
from memcore.core.redact import redact_log_records
from memcore.core.settings import Settings
from memcore.fronts.daemon import Daemon, install_signal_handlers
from memcore.fronts.daemon_state import daemon_status


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def _configure_logging(verbose: bool, json_logs: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if json_logs
        else logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    )
    redact_log_records()
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("memcore").setLevel(logging.DEBUG if verbose else logging.INFO)


@app.command()
def watch(
    ctx: typer.Context,
    poll: Annotated[
        bool, typer.Option("--poll", help="Poll instead of native file events")
    ] = False,
    json_logs: Annotated[
        bool, typer.Option("--json-logs", help="One JSON object per log line")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Run in the background; return once it is watching")
    ] = False,
) -> None:
    """Keep the index current: catch up with the vault, then index every change as it happens."""
    if detach:
        _detach(ctx, poll, json_logs)
        return
    _configure_logging(ctx.obj.verbose, json_logs)

    async def job() -> None:
        from memcore.fronts.serve import serve_socket  # answers one-shot CLI searches

        settings = settings_of(ctx)
        stop = asyncio.Event()
        install_signal_handlers(stop, settings.server.stop_timeout_s)
        while not stop.is_set():  # again after .memcore/ was deleted under it: a new index
            async with open_service(settings, catch_up=False) as service:
                daemon = Daemon(settings, service, stop, force_polling=poll)
                answering = asyncio.create_task(serve_socket(service, daemon))
                try:
                    await daemon.run()
                finally:
                    daemon.ended.set()
                    await answering
            if not daemon.lost:
                break

    run(ctx, job)


def _detach(ctx: typer.Context, poll: bool, json_logs: bool) -> None:
    """Start `memcore watch` as a background process and wait until it is watching."""
    settings = run(ctx, _settings_job(ctx))
    running = daemon_status(settings)
    if running:
        # Idempotent, so a setup script (the README's first line) can run twice.
        typer.echo(f"memcore watch is already running (pid {running['pid']}) for {settings.vault}")
        return
    ensure_state_dir(settings, daemon=True)
    log_path = settings.state_dir / "daemon.log"
    cmd = [sys.executable, "-m", "memcore", "--vault", str(settings.vault)]
    for key, flag in (("storage.db", "--db"), ("embedder.provider", "--embedder")):
        if ctx.obj.overrides.get(key):
            cmd += [flag, str(ctx.obj.overrides[key])]
    cmd += ["--verbose"] if ctx.obj.verbose else []
    cmd += ["watch", *(["--poll"] if poll else []), *(["--json-logs"] if json_logs else [])]
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab") as log_file:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True
        )
    while True:
        info = daemon_status(settings)
        if info and (info.get("watching") or info.get("role") == "standby"):
            typer.echo(f"memcore watch is running (pid {proc.pid}); log: {log_path}")
            return
        if proc.poll() is not None:
            lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            raise fail(lines[-1].removeprefix("memcore: ") if lines else "memcore watch exited")
        time.sleep(0.1)


def _settings_job(ctx: typer.Context) -> Callable[[], Coroutine[Any, Any, Settings]]:
    async def job() -> Settings:
        return settings_of(ctx)

    return job


@app.command()
def stop(ctx: typer.Context) -> None:
    """Stop the vault's `memcore watch` or `memcore serve` (sends SIGTERM and waits for it to
    finish its batch); says which it stopped."""
    settings = run(ctx, _settings_job(ctx))
    info = daemon_status(settings)
    if not info or not isinstance(info.get("pid"), int):
        typer.echo("no memcore watch or serve is running for this vault")
        return
    pid = int(str(info["pid"]))
    what = f"memcore {info.get('kind') or 'watch'}"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while daemon_status(settings) and time.monotonic() < deadline:
        time.sleep(0.1)
    if daemon_status(settings):
        raise fail(f"{what} (pid {pid}) did not stop within 60 s")
    typer.echo(f"stopped {what} (pid {pid})")


service_app = typer.Typer(
    help="Run `memcore watch` (or `memcore serve`) as a background service.", no_args_is_help=True
)
app.add_typer(service_app, name="service")

SYSTEMD_UNIT = """[Unit]
Description=memcore: {what} {vault}
After=default.target

[Service]
Type=simple
ExecStart={command}
Restart=on-failure
RestartSec=5
# memcore leaves within server.stop_timeout_s (8 s) of SIGTERM whatever it is doing
TimeoutStopSec=30

[Install]
WantedBy=default.target
"""

LAUNCHD_PLIST = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>{label}</string>
  <key>ProgramArguments</key>
  <array>{arguments}</array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
  <key>ExitTimeOut</key><integer>30</integer>
  <key>StandardErrorPath</key><string>{log}</string>
</dict>
</plist>
"""


def unit_name(vault: Path) -> str:
    """memcore-<folder>-<hash of the full path>: two vaults named alike get two units."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in vault.name) or "vault"
    digest = hashlib.sha256(str(vault).encode()).hexdigest()[:8]
    return f"memcore-{safe}-{digest}"


def systemd_quote(arg: str) -> str:
    """One ExecStart word: double-quoted, with systemd's specifiers and variables escaped."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def watch_command(
    settings: Settings, overrides: dict[str, object], serving: list[str] | None = None
) -> list[str]:
    """The argv that runs this vault's watcher with the options given now (--db, --embedder);
    with ``serving`` (its options), `memcore serve` instead."""
    exe = shutil.which("memcore")
    cmd = [exe] if exe else [sys.executable, "-m", "memcore"]
    cmd += ["--vault", str(settings.vault)]
    for key, flag in (("storage.db", "--db"), ("embedder.provider", "--embedder")):
        if overrides.get(key):
            cmd += [flag, str(overrides[key])]
    return [*cmd, "watch"] if serving is None else [*cmd, "serve", *serving]


def serve_options(host: str, port: int, token_file: Path | None) -> list[str]:
    """`memcore serve`'s options for a service. A token can only come from a file here: a
    unit file's command line is as public as `ps`. Off loopback a token file is required."""
    from memcore.core.errors import ConfigError

    loopback = host in ("127.0.0.1", "localhost", "::1")
    if not loopback and token_file is None:
        raise ConfigError(f"serving on {host} (not loopback) needs --token-file")
    options = ["--host", host, "--port", str(port)]
    if token_file is not None:
        if not token_file.is_file():
            raise ConfigError(f"no token file at {token_file}")
        options += ["--token-file", str(token_file.resolve())]
    return options


@service_app.command("install")
def service_install(
    ctx: typer.Context,
    launchd: Annotated[bool, typer.Option("--launchd", help="Write a macOS launchd agent")] = (
        sys.platform == "darwin"
    ),
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the file, write nothing")
    ] = False,
    serve: Annotated[
        bool, typer.Option("--serve", help="Run `memcore serve` (HTTP, Mem0 REST, MCP)")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="With --serve: address to bind")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="With --serve")] = 8765,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="With --serve: the token's file")
    ] = None,
) -> None:
    """Write a systemd user unit (or launchd agent on macOS) that runs `memcore watch`, or
    with --serve `memcore serve` (which watches too)."""

    async def job() -> tuple[Path, str, str]:
        settings = settings_of(ctx)
        serving = serve_options(host, port, token_file) if serve else None
        cmd = watch_command(settings, ctx.obj.overrides, serving)
        name = unit_name(settings.vault) + ("-serve" if serve else "")
        if launchd:
            label = f"dev.memcore.{name}"
            target = Path.home() / "Library" / "LaunchAgents" / f"{label}.plist"
            text = LAUNCHD_PLIST.format(
                label=xml_escape(label),
                arguments="".join(f"<string>{xml_escape(a)}</string>" for a in cmd),
                log=xml_escape(str(settings.state_dir / "daemon.log")),
            )
            hint = f"launchctl load -w {target}"
        else:
            target = user_config_dir() / "systemd" / "user" / f"{name}.service"
            command = " ".join(systemd_quote(a) for a in cmd)
            vault = str(settings.vault).replace("%", "%%")
            what = "serve the memory of" if serve else "keep the memory index current of"
            text = SYSTEMD_UNIT.format(command=command, vault=vault, what=what)
            hint = f"systemctl --user daemon-reload && systemctl --user enable --now {name}.service"
        return target, text, hint

    target, text, hint = run(ctx, job)
    if print_only:
        typer.echo(text, nl=False)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {target}\nstart it with: {hint}")
