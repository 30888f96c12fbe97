"""``--config FILE`` (or ``TRIO_DURABLE_CONFIG``) of ``trio-durable
engine`` and ``worker``: one TOML file for a fleet's processes.

::

    app = "orders:app"

    [store]
    url = "sqlite:///var/lib/orders/store.db"

    [broker]
    url = "amqp://orders@rabbit/"

    [engine]
    lease_ttl = 30
    retention = { completed = "7d", failed = "30d" }
    http = "0.0.0.0:9464"

    [worker]
    groups = ["email"]
    http = "0.0.0.0:9465"

Each key of ``[engine]`` and ``[worker]`` is an option of that command,
named as `open_engine` or `open_worker` names it (`config_keys`), plus the
two keyrings, which no flag carries (`SECRET_KEYS`). The file's values
become the command's defaults (click's ``default_map``): a flag or an
environment variable overrides them. The whole file, both sections, is
checked when the command starts, before it loads the app or connects to
anything: a section or key it does not know, or a value its option
refuses, is a usage error (exit 2) naming the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import click

from ._common import F

CONFIG_ENV: Final = "TRIO_DURABLE_CONFIG"

SECRET_KEYS: Final = {
    "codec_keys": "TRIO_DURABLE_CODEC_KEYS",
    "signing_keys": "TRIO_DURABLE_SIGNING_KEYS",
}
"""The keys of ``[engine]`` and ``[worker]`` that no flag carries (a
command line is visible to every user of the host), with the environment
variable that overrides each: the payload codec's and the message
signing's keyrings, ``id:base64`` pairs, the current key first."""

PYTHON_ONLY: Final = {
    "wall_clock": "a function, given from Python (open_engine(wall_clock=...))",
    "codec": "a codec object; in the file, codec_keys gives its keyring",
    "signing": "a keyring object; in the file, signing_keys gives it",
}
"""Options of `open_engine` or `open_worker` the file cannot carry as they
are, and what to write instead."""

SECTIONS: Final = ("engine", "worker")
"""The sections of the commands that read a config file."""

_FILE_KEY: Final = "trio_durable.config"

_RENAMED: Final = {
    # Parameters whose name differs from the option the file names.
    "app_spec": "app",
    "http_address": "http",
    "with_console": "console",
    "console_token": "token",
    "gc_thresholds": "gc",
}


def config_keys(command: click.Command) -> dict[str, click.Parameter]:
    """The keys of ``command``'s section, each with the parameter it sets:
    a parameter's name where it is an option of `open_engine` or
    `open_worker` (``worker_concurrency``), else its flag's
    (``drain_timeout``, ``http``); ``app`` for MODULE:APP. The store and
    the broker are set from ``[store]`` and ``[broker]``, and ``--config``
    from nothing."""
    keys: dict[str, click.Parameter] = {}
    for param in command.params:
        name = param.name
        if name is None or name in ("store", "broker", "config"):
            continue
        keys[_RENAMED.get(name, name)] = param
    return keys


def _secret(key: str) -> str | None:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    found: dict[str, str] = ctx.meta.get(_FILE_KEY, {})
    return found.get(key)


def config_secret(key: str) -> str | None:
    """The value of ``key`` (one of `SECRET_KEYS`) in the section of the
    running command's config file, if it has one."""
    return _secret(key)


def _as_option_value(param: click.Parameter, value: object, where: str) -> object:
    """A TOML value as the option reads it: a list for a repeated option,
    ``k=v,...`` for a table, ``a,b`` for an array, a bool for a flag."""
    is_flag = isinstance(param, click.Option) and param.is_flag
    if is_flag != isinstance(value, bool):
        wanted = "true or false" if is_flag else "a string or a number, not true or false"
        raise click.UsageError(f"{where}: give {wanted}, not {value!r}")
    if isinstance(param.type, click.types.IntParamType) and isinstance(value, float):
        raise click.UsageError(f"{where}: give a whole number, not {value!r}")
    if param.multiple:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise click.UsageError(f"{where}: give a list of names, not {value!r}")
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value


def _checked_section(
    path: Path, section: str, table: object, command: click.Command, ctx: click.Context
) -> dict[str, object]:
    """``table``'s values by parameter name, each checked by its option."""
    if not isinstance(table, Mapping):
        raise click.UsageError(f"{path}: [{section}] must be a table of keys")
    keys = config_keys(command)
    values: dict[str, object] = {}
    for key, value in table.items():
        where = f"{path}: [{section}] {key}"
        if key in SECRET_KEYS:
            if not isinstance(value, str):
                raise click.UsageError(f"{where}: give a keyring string (id:base64,...)")
            continue
        if key in PYTHON_ONLY:
            raise click.UsageError(f"{where}: not in a config file: {PYTHON_ONLY[key]}")
        param = keys.get(key)
        if param is None:
            raise click.UsageError(
                f"{where}: unknown key; [{section}] takes {', '.join(sorted(keys))},"
                f" {', '.join(SECRET_KEYS)}"
            )
        read = _as_option_value(param, value, where)
        try:
            param.process_value(ctx, read)
        except click.BadParameter as exc:
            raise click.UsageError(f"{where}: {exc.message}") from None
        assert param.name is not None
        values[param.name] = read
    return values


def _url(path: Path, document: Mapping[str, object], section: str) -> str | None:
    table = document.get(section)
    if table is None:
        return None
    if not isinstance(table, Mapping) or set(table) - {"url"}:
        raise click.UsageError(f'{path}: [{section}] takes one key, url = "..."')
    url = table.get("url")
    if not isinstance(url, str):
        raise click.UsageError(f"{path}: [{section}] url must be a string")
    return url


def _sections(ctx: click.Context) -> dict[str, click.Command | None]:
    """The commands whose sections a file holds, by section: those of the
    ``trio-durable`` group the running command belongs to (the running
    command alone when it runs outside it)."""
    root = ctx.find_root()
    found: dict[str, click.Command | None] = dict.fromkeys(SECTIONS)
    if isinstance(root.command, click.Group):
        for name in SECTIONS:
            found[name] = root.command.get_command(root, name)
    return found


def read_config(path: Path, section: str, ctx: click.Context) -> dict[str, object]:
    """The defaults ``path`` gives the command of ``section`` (``engine``
    or ``worker``), by parameter name; both sections are checked.

    Raises:
      click.UsageError: The file is no TOML, or has a section or key the
        commands do not know, or a value its option refuses.
    """
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"{path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise click.UsageError(f"{path}: not TOML: {exc}") from None
    commands = {**_sections(ctx), section: ctx.command}
    unknown = set(document) - {"app", "store", "broker", *SECTIONS}
    if unknown:
        raise click.UsageError(
            f"{path}: unknown key or section {', '.join(sorted(unknown))}; a config file has"
            " app, [store], [broker], [engine] and [worker]"
        )
    found: dict[str, dict[str, object]] = {}
    for name, command in commands.items():
        if command is None:
            continue
        table = document.get(name, {})
        if "app" in document and isinstance(table, Mapping):
            table = {"app": document["app"], **table}
        found[name] = _checked_section(path, name, table, command, ctx)
    defaults = found[section]
    for resource in ("store", "broker"):
        url = _url(path, document, resource)
        if url is not None:
            defaults[resource] = url
    table = document.get(section, {})
    assert isinstance(table, Mapping)
    ctx.meta[_FILE_KEY] = {key: table[key] for key in SECRET_KEYS if key in table}
    return defaults


def config_option(section: str) -> Callable[[F], F]:
    """``--config FILE`` (``TRIO_DURABLE_CONFIG``): the command's defaults
    from the ``[section]`` of a TOML file (see the module's docstring)."""

    def load(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is None:
            return
        defaults = read_config(Path(value), section, ctx)
        ctx.default_map = {**(ctx.default_map or {}), **defaults}

    return click.option(
        "--config",
        metavar="FILE",
        type=click.Path(exists=True, dir_okay=False),
        envvar=CONFIG_ENV,
        show_envvar=True,
        is_eager=True,
        expose_value=False,
        callback=load,
        help=f"A TOML file whose [{section}] section (and [store], [broker], app) gives this"
        " command's options; flags and environment variables override it.",
    )
