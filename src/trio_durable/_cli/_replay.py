"""``trio-durable replay MODULE:APP PATH...``: exported histories (``runs
export``) replayed against an app's code in memory, for CI: exit status 0
when every one replays cleanly, 1 with a report of each that does not, 2
for a usage error (an app that does not load, a path that is no history
file or folder, a file that is no history). See
docs/changing-workflow-code.md."""

from __future__ import annotations

from pathlib import Path

import click
import trio

from .._base._exceptions import EncryptedHistoryError, HistoryError, NonDeterminismError
from ..testing._replay import history_paths, replay_files
from ._apps import load_app
from ._codec import env_codec
from ._common import EXIT_FAILED, EXIT_USAGE, CommandError, json_option, print_json


@click.command("replay", short_help="Replay exported histories against an app's code.")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument(
    "paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@json_option
@click.pass_context
def replay_command(
    ctx: click.Context, app_spec: str, paths: tuple[Path, ...], as_json: bool
) -> None:
    """Replay the exported histories at PATH (files, or folders of *.json
    files) against the workflows of MODULE:APP, in memory: no store, no
    broker, no step runs. Each run's body replays as an engine would replay
    it (patches answer as there); a run that ended must end the same way.

    Exit status 0 when every history replays cleanly; 1 when one does not,
    with a report of each: the seq, what the history recorded (kind, name,
    a digest of the arguments), what the code asks for, and the file and
    line that asked; 2 for a usage error (a path or a file that is no
    history). Histories exported --encrypted need TRIO_DURABLE_CODEC_KEYS.
    """
    app = load_app(app_spec)
    try:
        files = history_paths(paths)
    except HistoryError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    outcomes = trio.run(replay_files, app, files, env_codec())
    failed = [o for o in outcomes if o.error is not None]
    unreadable = [o for o in failed if isinstance(o.error, HistoryError | EncryptedHistoryError)]
    if as_json:
        print_json(
            {
                "replayed": len(outcomes) - len(failed),
                "failed": [
                    {
                        "path": str(o.path),
                        "error": type(o.error).__name__,
                        "message": str(o.error),
                        "details": getattr(o.error, "details", None),
                    }
                    for o in failed
                ],
            }
        )
    else:
        for outcome in failed:
            error = outcome.error
            text = str(error)
            if not isinstance(error, NonDeterminismError) and str(outcome.path) not in text:
                text = f"{outcome.path}: {text}"
            click.echo(text + "\n")
        summary = f"{len(outcomes) - len(failed)} of {len(outcomes)} histories replay cleanly"
        click.echo(summary if not failed else f"{summary}; {len(failed)} do not", err=bool(failed))
    if unreadable:
        ctx.exit(EXIT_USAGE)
    if failed:
        ctx.exit(EXIT_FAILED)
