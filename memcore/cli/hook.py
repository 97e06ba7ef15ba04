"""`memcore hook install|run`: commits tagged [Memory] become entries in MEMORY.md."""

from __future__ import annotations

from typing import Annotated

import typer

from memcore.cli import app, run, settings_of
from memcore.compose import open_service
from memcore.vault import githook

hook_app = typer.Typer(help="The git post-commit hook.", no_args_is_help=True)
app.add_typer(hook_app, name="hook")


@hook_app.command("install")
def install(
    ctx: typer.Context,
    remove: Annotated[bool, typer.Option("--uninstall", help="Remove the hook's block")] = False,
) -> None:
    """Add a post-commit hook to the vault's git repository (idempotent; an existing hook is
    kept and the memcore block is added to it)."""

    async def job() -> str:
        settings = settings_of(ctx)
        if remove:
            hook, changed = githook.uninstall(settings.vault)
            return f"removed memcore from {hook}" if changed else "no memcore hook to remove"
        extra = []
        for key, flag in (("storage.db", "--db"), ("embedder.provider", "--embedder")):
            if ctx.obj.overrides.get(key):
                extra += [flag, str(ctx.obj.overrides[key])]
        hook, changed = githook.install(settings.vault, settings.vault, extra)
        markers = ", ".join(settings.hook.markers)
        state = "installed" if changed else "already installed"
        return f"{state}: {hook} (commits marked {markers} go to {settings.hook.file})"

    typer.echo(run(ctx, job))


@hook_app.command("run")
def run_hook(
    ctx: typer.Context,
    rev: Annotated[str, typer.Argument(help="The commit (default: HEAD)")] = "HEAD",
) -> None:
    """What the hook runs after a commit. Never fails: problems go to .memcore/hook.log."""

    async def job() -> None:
        settings = settings_of(ctx)
        try:
            commit = githook.read_commit(settings.vault, rev)
            if not githook.marked(commit, settings.hook.markers):
                return
            text = githook.summary(commit, settings.hook.markers)
            async with open_service(settings) as service:
                await service.memories.write_memory(text, settings.hook.file)
            githook.log_line(settings.state_dir, f"{commit.short}: added to {settings.hook.file}")
        except Exception as exc:  # the commit is done; the log is the only place to say why
            githook.log_line(settings.state_dir, f"{rev}: {type(exc).__name__}: {exc}")

    run(ctx, job)
