"""`open_engine`'s options are declared once, in `EngineOptions`' fields
(and `ENGINE_RESOURCES` for the app, the store and the broker), and every
other place that names them is checked against that declaration or made
from it:

- `open_engine`'s signature, written out for readers and type checkers:
  the same names in the same order, annotations and defaults;
- `open_engine` passes each option to `EngineOptions`;
- the table of docs/configuration.md, written by
  ``python -m trio_durable._process._options_docs``;
- the flags of ``trio-durable engine``, built from the declared ones, which
  reach `open_engine` under the options' names.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import trio_durable as td
from cli_processes import TESTS
from trio_durable._cli import _processes, cli
from trio_durable._kernel._engine_options import (
    ENGINE_RESOURCES,
    Declared,
    EngineOption,
    EngineOptions,
    engine_options,
)
from trio_durable._process import _options_docs
from trio_durable._process._open_engine import open_engine
from trio_durable._process._options_docs import (
    BEGIN,
    END,
    PAGE,
    MarkersMissing,
    main,
    option_table,
    shown_default,
    with_table,
)

RESOURCES = [option.name for option in ENGINE_RESOURCES]


def differences(signature: inspect.Signature, declared: dict[str, EngineOption]) -> list[str]:
    """How ``signature`` differs from the declared options (empty if in
    nothing): names, their order, annotations, defaults, kinds."""
    found: list[str] = []
    parameters = signature.parameters
    for name in parameters.keys() - declared.keys():
        found.append(f"{name} is a parameter but not declared")
    for name in declared.keys() - parameters.keys():
        found.append(f"{name} is declared but not a parameter")
    fields = [field.name for field in attrs.fields(EngineOptions)]
    in_order = [name for name in parameters if name not in RESOURCES]
    if in_order != fields:
        found.append(f"the parameters are in the order {in_order}, the fields in {fields}")
    for name in parameters.keys() & declared.keys():
        parameter, option = parameters[name], declared[name]
        if parameter.annotation != option.annotation:
            found.append(
                f"{name}: annotated {parameter.annotation!r}, declared {option.annotation!r}"
            )
        default = (
            attrs.NOTHING if parameter.default is inspect.Parameter.empty else parameter.default
        )
        if default != option.default:
            found.append(f"{name}: defaults to {default!r}, declared {option.default!r}")
        kind = (
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if name == "app"
            else inspect.Parameter.KEYWORD_ONLY
        )
        if parameter.kind != kind:
            found.append(f"{name}: a {parameter.kind.description} parameter")
    return sorted(found)


def test_open_engine_s_signature_is_the_declaration() -> None:
    assert differences(inspect.signature(open_engine), engine_options()) == []
    # The public name is that function.
    assert inspect.signature(td.open_engine) == inspect.signature(open_engine)


def test_the_signature_check_sees_each_kind_of_difference() -> None:
    signature = inspect.signature(open_engine)
    parameters = list(signature.parameters.values())
    lease = next(i for i, p in enumerate(parameters) if p.name == "lease_ttl")

    def changed(*replaced: inspect.Parameter) -> list[str]:
        return differences(signature.replace(parameters=list(replaced)), engine_options())

    renamed = [*parameters]
    renamed[lease] = renamed[lease].replace(name="lease_seconds")
    assert changed(*renamed) == [
        "lease_seconds is a parameter but not declared",
        "lease_ttl is declared but not a parameter",
        f"the parameters are in the order {[p.name for p in renamed if p.name not in RESOURCES]},"
        f" the fields in {[f.name for f in attrs.fields(EngineOptions)]}",
    ]
    retyped = [*parameters]
    retyped[lease] = retyped[lease].replace(annotation="int")
    assert changed(*retyped) == ["lease_ttl: annotated 'int', declared 'float'"]
    redefaulted = [*parameters]
    redefaulted[lease] = redefaulted[lease].replace(default=31.0)
    assert changed(*redefaulted) == ["lease_ttl: defaults to 31.0, declared 30.0"]
    removed = changed(*parameters[:lease], *parameters[lease + 1 :])
    assert removed[0] == "lease_ttl is declared but not a parameter"
    assert removed[1].startswith("the parameters are in the order")
    assert len(removed) == 2
    swapped = [*parameters]
    swapped[lease], swapped[lease + 1] = swapped[lease + 1], swapped[lease]
    assert len(changed(*swapped)) == 1
    assert changed(*swapped)[0].startswith("the parameters are in the order")


def test_every_option_is_declared_with_a_meaning() -> None:
    for field in attrs.fields(EngineOptions):
        declared = field.metadata.get("declared")
        assert isinstance(declared, Declared), field.name
        assert declared.doc.strip(), field.name
        assert "\n" not in declared.doc, field.name
    # A converter that widens what open_engine takes says so.
    assert engine_options()["webhook_secret"].annotation == "bytes | str | None"
    assert engine_options()["timer_batch_size"].annotation == "float"


def test_open_engine_passes_every_option_to_engine_options() -> None:
    source = Path(inspect.getfile(inspect.unwrap(open_engine))).read_text(encoding="utf-8")
    (call,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "EngineOptions"
    ]
    assert not call.args
    passed = {k.arg: k.value for k in call.keywords}
    assert list(passed) == [field.name for field in attrs.fields(EngineOptions)]
    # Each as the caller gave it.
    assert all(isinstance(v, ast.Name) and v.id == k for k, v in passed.items())


def test_the_configuration_page_holds_the_generated_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert with_table(page) == page, "run: python -m trio_durable._process._options_docs"
    section = page.split("\n## open_engine\n", 1)[1].split("\n## ", 1)[0]
    assert BEGIN in section
    assert END in section
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| ", section, re.MULTILINE)
    assert [name for name, _ in rows] == list(inspect.signature(open_engine).parameters)
    shown = dict(rows)
    assert shown["app"] == "(required)"
    assert shown["store"] == '`"memory://"`'
    assert shown["lease_ttl"] == "`30.0`"
    assert shown["serve"] == "`()`"
    assert shown["remote_redispatch"] == "`None` (off)"


def test_the_docs_command_rewrites_a_stale_table_and_checks_it(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# Configuration\n\n{BEGIN}\n| stale |\n{END}\n\nAfter.\n")
    assert main(["--check", "--page", str(page)]) == 1
    assert main(["--page", str(page)]) == 0
    assert (
        page.read_text() == f"# Configuration\n\n{BEGIN}\n\n{option_table()}\n\n{END}\n\nAfter.\n"
    )
    assert main(["--check", "--page", str(page)]) == 0
    page.write_text("# No markers\n")
    assert main(["--page", str(page)]) == 2
    with pytest.raises(MarkersMissing):
        with_table(f"{END}\n{BEGIN}\n")


def test_a_bar_in_a_meaning_does_not_end_its_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    options = engine_options()
    options["lease_ttl"] = attrs.evolve(
        options["lease_ttl"], declared=Declared(doc="`int | float` seconds")
    )
    monkeypatch.setattr(_options_docs, "engine_options", lambda: options)
    assert "| `lease_ttl` | `30.0` | `int \\| float` seconds |" in option_table()
    assert shown_default(options["app"]) == "(required)"


def _engine_flags() -> dict[str, Any]:
    return {
        flag: param
        for param in _processes.engine_command.params
        for flag in param.opts
        if flag.startswith("--")
    }


def test_the_engine_command_has_the_declared_flags_and_no_others() -> None:
    flags = _engine_flags()
    declared = {o.declared.cli: o for o in engine_options().values() if o.declared.cli}
    assert set(flags) - declared.keys() == {
        "--drain-timeout",
        "--migrate",
        "--gc",
        "--log-level",
        "--log-format",
        "--http",
        "--console",
        "--token",
        "--tracing",
        "--config",
    }
    for flag, option in declared.items():
        param = flags[flag]
        assert param.name == option.name, flag
        if option.name == "store":
            # No default: the command needs a store, from --store or the
            # environment (test_cli.py: test_an_engine_needs_a_store).
            assert param.envvar == "TRIO_DURABLE_STORE"
        else:
            assert param.default == option.default, flag
    assert declared.keys() >= {"--store", "--broker", "--lease-ttl", "--concurrency"}


def test_each_flag_reaches_open_engine_under_its_option_s_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received: dict[str, Any] = {}

    async def serve(
        app: td.App,
        options: dict[str, Any],
        drain_timeout: float,
        collected: str,
        http_address: tuple[str, int] | None,
        console: object,
    ) -> None:
        received.update(options)
        # open_engine would take them as they are.
        inspect.signature(open_engine).bind(app, **options)

    monkeypatch.setattr(_processes, "_serve_engine", serve)
    monkeypatch.chdir(TESTS)
    monkeypatch.delenv("TRIO_DURABLE_CODEC_KEYS", raising=False)
    monkeypatch.delenv("TRIO_DURABLE_SIGNING_KEYS", raising=False)
    monkeypatch.delenv("TRIO_DURABLE_BLOBS", raising=False)
    monkeypatch.delenv("TRIO_DURABLE_WEBHOOK_SECRET", raising=False)
    args = [
        "engine",
        "cli_app:app",
        "--store",
        "memory://",
        "--engine-id",
        "e-1",
        "--lease-ttl",
        "12",
        "--reconcile-interval",
        "0.5",
        "--serve",
        "cli,other",
        "--concurrency",
        "3",
        "--capabilities",
        "gpu",
        "--remote-redispatch",
        "300,2",
        "--retention",
        "completed=7d, failed=30d,events=forever,batch=50",
        "--seed",
        "9",
        "--timer-batch-size",
        "40",
        "--result-poll-interval",
        "2",
        "--max-recoveries",
        "0",
        "--blocked-recheck",
        "3",
        "--traceback-limit",
        "0",
        "--metrics-interval",
        "30",
        "--webhook-secret",
        "sixteen-bytes-or-more",
        "--blobs",
        "blobs-dir",
        "--blob-threshold",
        "1000",
        "--blob-grace",
        "0",
        "--build-id",
        "b1",
    ]
    result = CliRunner(env={"TRIO_DURABLE_BROKER": None}).invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert received == {
        "store": "memory://",
        "broker": "memory://",
        "engine_id": "e-1",
        "lease_ttl": 12.0,
        "reconcile_interval": 0.5,
        "serve": ("cli", "other"),
        "worker_concurrency": 3,
        "capabilities": ("gpu",),
        "remote_redispatch": (300.0, 2),
        "tracing": False,
        "retention": td.Retention(completed=7 * 86400, failed=30 * 86400, events=None, batch=50),
        "seed": 9,
        "timer_batch_size": 40,
        "result_poll_interval": 2.0,
        "max_recoveries": 0,
        "blocked_recheck": 3.0,
        "traceback_limit": 0,
        "metrics_interval": 30.0,
        "webhook_secret": "sixteen-bytes-or-more",
        "blobs": "blobs-dir",
        "blob_threshold": 1000,
        "blob_grace": 0.0,
        "build_id": "b1",
        "codec": None,
        "signing": None,
    }
    # Without the flags: the declared defaults, and an id of its own (for an
    # app with no remote step, which needs no --serve on memory://).
    received.clear()
    result = CliRunner(env={"TRIO_DURABLE_BROKER": None}).invoke(
        cli, ["engine", "schema_2_app:app", *args[2:4]]
    )
    assert result.exit_code == 0, result.output
    defaults = {o.name: o.default for o in engine_options().values() if o.declared.cli}
    assert {k: received[k] for k in defaults.keys() - {"engine_id", "store"}} == {
        k: v for k, v in defaults.items() if k not in ("engine_id", "store")
    }
    assert received["engine_id"].startswith("engine-")
