"""`memcore hook install|run|rewritten`: commits tagged [Memory] become entries in MEMORY.md."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from memcore.cli.app import app, run, settings_of
from memcore.compose import open_service
from memcore.core.lines import split_lines
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
            hooks, changed = githook.uninstall(settings.vault)
            where = " and ".join(str(h) for h in hooks)
            return f"removed memcore from {where}" if changed else "no memcore hook to remove"
        extra = []
        for key, flag in (("storage.db", "--db"), ("embedder.provider", "--embedder")):
            if ctx.obj.overrides.get(key):
                extra += [flag, str(ctx.obj.overrides[key])]
        hooks, changed = githook.install(settings.vault, settings.vault, extra)
        markers = ", ".join(settings.hook.markers)
        state = "installed" if changed else "already installed"
        where = " and ".join(str(h) for h in hooks)
        return f"{state}: {where} (commits marked {markers} go to {settings.hook.file})"

    typer.echo(run(ctx, job))


@hook_app.command("run")
def run_hook(
    ctx: typer.Context,
    rev: Annotated[str, typer.Argument(help="The commit (the installed hook passes its sha)")] = (
        "HEAD"
    ),
) -> None:
    """What the post-commit hook runs: the commit's entry, once however often it runs. Never
    fails: problems go to .memcore/hook.log."""

    async def job() -> None:
        settings = settings_of(ctx)
        try:
            commit = githook.read_commit(settings.vault, rev)
            if not githook.marked(commit, settings.hook.markers):
                return
            entry = githook.summary(commit, settings.hook.markers)
            vault = settings.vault

            def placed(text: str) -> str | None:
                # the later commits asked once the text is read: every entry in it is then of
                # a commit git already has (the hooks of rapid commits race in the background)
                later = githook.later_commits(vault, commit.sha)
                return githook.with_entry(text, commit.sha, entry, later)

            async with open_service(settings) as service:
                added = await service.writer.rewrite_note(settings.hook.file, placed)
            done = "added to" if added else "already in"
            githook.log_line(settings.state_dir, f"{commit.short}: {done} {settings.hook.file}")
        except Exception as exc:  # the commit is done; the log is the only place to say why
            githook.log_line(settings.state_dir, f"{rev}: {type(exc).__name__}: {exc}")

    run(ctx, job)


@hook_app.command("rewritten")
def rewritten(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="amend or rebase, as git says")] = "amend",
    orig_head: Annotated[
        str, typer.Option("--orig-head", help="The branch before a rebase (its ORIG_HEAD)")
    ] = "",
) -> None:
    """What the post-rewrite hook runs: reads "old-sha new-sha" lines on stdin and replaces
    the old commits' entries with the new commits'; after a rebase, the entries of the
    commits it dropped go too. Never fails: see .memcore/hook.log."""
    pairs = [line.split()[:2] for line in split_lines(sys.stdin.read()) if len(line.split()) >= 2]

    async def job() -> None:
        settings = settings_of(ctx)
        try:
            githook.wait_for_rebase(settings.vault)  # its autostash back in the work tree
            dropped = (
                githook.dropped_commits(settings.vault, orig_head, [old for old, _ in pairs])
                if kind == "rebase"
                else []
            )
            rewrites = []
            for old, new in pairs:
                commit = githook.read_commit(settings.vault, new)
                marked = githook.marked(commit, settings.hook.markers)
                entry = githook.summary(commit, settings.hook.markers) if marked else None
                rewrites.append((old, commit.sha, entry))
            async with open_service(settings) as service:
                changed = await service.writer.rewrite_note(
                    settings.hook.file,
                    lambda text: githook.with_rewrites(text, rewrites, dropped),
                )
            if changed:
                githook.log_line(settings.state_dir, f"{kind}: entries of rewritten commits")
        except Exception as exc:
            githook.log_line(settings.state_dir, f"{kind}: {type(exc).__name__}: {exc}")

    run(ctx, job)
