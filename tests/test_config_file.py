"""``trio-durable engine --config FILE`` and ``worker --config FILE`` (or
``TRIO_DURABLE_CONFIG``): one TOML file carries the options of both
processes; flags and environment variables override it; a section, key or
value it does not know is a usage error naming the file and the key,
before the app is loaded or anything connects; the tables of
docs/configuration.md are written from the commands' options."""

from __future__ import annotations

import inspect
import signal
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import trio_durable as td
from cli_processes import TESTS, cli_process, start_runs, wait_for_runs
from trio_durable._cli import _config_docs, _processes, cli
from trio_durable._cli._config_file import PYTHON_ONLY, SECRET_KEYS, config_keys
from trio_durable._front._open_worker import open_worker
from trio_durable._kernel._engine_options import EngineOptions
from trio_durable._process import _options_docs

KEY = "k1:" + "A" * 43 + "="
OTHER_KEY = "k2:" + "B" * 43 + "="

CONFIG = f"""
app = "cli_app:app"

[store]
url = "memory://"

[broker]
url = "memory://"

[engine]
engine_id = "from-file"
lease_ttl = 12
serve = ["cli"]
worker_concurrency = 3
retention = {{ completed = "7d", failed = "30d" }}
remote_redispatch = [300, 2]
seed = 7
timer_batch_size = 50
max_recoveries = 4
traceback_limit = 100
blob_threshold = 1000
drain_timeout = 5
log_format = "json"
codec_keys = "{KEY}"

[worker]
groups = "cli,other"
concurrency = 4
heartbeat = 2
ttl = 9
max_deliveries = 3
traceback_limit = 0
signing_keys = "{KEY}"
"""


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `open_engine` or `open_worker` would be given by the command
    (each checked against its signature), and the process's settings."""
    got: dict[str, Any] = {}

    async def serve_engine(
        app: td.App,
        options: dict[str, Any],
        drain_timeout: float,
        collected: str,
        http_address: tuple[str, int] | None,
        console: object,
    ) -> None:
        inspect.signature(td.open_engine).bind(app, **options)
        got.update(options, drain_timeout=drain_timeout, app=app.name)

    async def serve_worker(
        app: td.App,
        options: dict[str, Any],
        drain_timeout: float,
        collected: str,
        http_address: tuple[str, int] | None,
    ) -> None:
        inspect.signature(open_worker).bind(app, **options)
        got.update(options, drain_timeout=drain_timeout, app=app.name, http=http_address)

    monkeypatch.setattr(_processes, "_serve_engine", serve_engine)
    monkeypatch.setattr(_processes, "_serve_worker", serve_worker)
    monkeypatch.chdir(TESTS)
    for name in (
        "TRIO_DURABLE_CODEC_KEYS",
        "TRIO_DURABLE_SIGNING_KEYS",
        "TRIO_DURABLE_STORE",
        "TRIO_DURABLE_BROKER",
        "TRIO_DURABLE_CONFIG",
        "TRIO_DURABLE_BLOBS",
    ):
        monkeypatch.delenv(name, raising=False)
    return got


def _run(args: list[str], **env: str | None) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(cli, args)
    return result.exit_code, result.output


def _file(tmp_path: Path, text: str = CONFIG) -> str:
    path = tmp_path / "trio-durable.toml"
    path.write_text(text)
    return str(path)


def test_the_file_gives_the_engine_its_options(tmp_path: Path, received: dict[str, Any]) -> None:
    status, output = _run(["engine", "--config", _file(tmp_path)])
    assert status == 0, output
    assert received["app"] == "cli-test"
    assert {k: received[k] for k in ("store", "broker", "engine_id", "lease_ttl")} == {
        "store": "memory://",
        "broker": "memory://",
        "engine_id": "from-file",
        "lease_ttl": 12.0,
    }
    assert received["serve"] == ("cli",)
    assert received["worker_concurrency"] == 3
    assert received["retention"] == td.Retention(completed=7 * 86400, failed=30 * 86400)
    assert received["remote_redispatch"] == (300.0, 2)
    assert (received["seed"], received["timer_batch_size"], received["max_recoveries"]) == (
        7,
        50,
        4,
    )
    assert (received["traceback_limit"], received["blob_threshold"]) == (100, 1000)
    assert received["drain_timeout"] == 5.0
    assert isinstance(received["codec"], td.AesGcmCodec)
    assert received["signing"] is None


def test_the_file_gives_the_worker_its_options(tmp_path: Path, received: dict[str, Any]) -> None:
    config = _file(tmp_path, CONFIG.replace('url = "memory://"', 'url = "nats://n:4222"'))
    status, output = _run(["worker"], TRIO_DURABLE_CONFIG=config)
    assert status == 0, output
    assert received["broker"] == "nats://n:4222"
    assert received["groups"] == ("cli", "other")
    assert (received["concurrency"], received["heartbeat"], received["ttl"]) == (4, 2.0, 9.0)
    assert (received["max_deliveries"], received["traceback_limit"]) == (3, 0)
    assert isinstance(received["signing"], td.Keyring)
    assert received["http"] is None


def test_flags_and_the_environment_override_the_file(
    tmp_path: Path, received: dict[str, Any]
) -> None:
    config = _file(tmp_path)
    status, output = _run(
        ["engine", "--config", config, "--lease-ttl", "20", "--serve", "cli,other"],
        TRIO_DURABLE_STORE="sqlite:///elsewhere.db",
        TRIO_DURABLE_CODEC_KEYS=OTHER_KEY,
    )
    assert status == 0, output
    assert received["lease_ttl"] == 20.0
    assert received["serve"] == ("cli", "other")
    assert received["store"] == "sqlite:///elsewhere.db"
    # The environment's keyring, not the file's.
    codec = received["codec"]
    assert isinstance(codec, td.AesGcmCodec)
    assert codec.keyring.current == "k2"
    # The rest still from the file.
    assert received["engine_id"] == "from-file"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("lease_ttl = 12", "lease_tll = 12"), "[engine] lease_tll: unknown key; [engine] takes"),
        (
            ("lease_ttl = 12", "lease_ttl = -1"),
            "[engine] lease_ttl: -1 is not a positive, finite number of seconds",
        ),
        (
            ("lease_ttl = 12", 'lease_ttl = "soon"'),
            "[engine] lease_ttl: 'soon' is not a number of seconds",
        ),
        (
            ("max_deliveries = 3", "max_deliveries = 0.5"),
            "[worker] max_deliveries: give a whole number",
        ),
        (("concurrency = 4", "concurrency = 0"), "[worker] concurrency: 0 is not in the range"),
        (("seed = 7", "seed = true"), "[engine] seed: give a string or a number"),
        (("seed = 7", "migrate = 1"), "[engine] migrate: give true or false"),
        (('groups = "cli,other"', "groups = [1]"), "[worker] groups: give a list of names"),
        (("seed = 7", "wall_clock = 0"), "[engine] wall_clock: not in a config file"),
        (("seed = 7", 'codec = "x"'), "[engine] codec: not in a config file"),
        (("seed = 7", 'http = "nowhere"'), "[engine] http: give HOST:PORT"),
        (("seed = 7", 'gc = "1,2,3,4"'), "[engine] gc: "),
        (('completed = "7d"', 'kept = "7d"'), "[engine] retention: "),
        (
            ("seed = 7", 'webhook_secret = "short"'),
            "[engine] webhook_secret: give a secret of at least 16 bytes",
        ),
        (("[worker]", "[workers]"), "unknown key or section workers"),
        (('url = "memory://"', 'address = "memory://"'), "[store] takes one key"),
        (("codec_keys = ", "codec_keys = 3 #"), "[engine] codec_keys: give a keyring string"),
        (("[broker]", "broker = 1\n[brokers]"), "unknown key or section brokers"),
        (("[engine]", "[engine]\n[engine]"), "not TOML"),
    ],
)
def test_a_bad_file_is_a_usage_error_naming_the_key(
    tmp_path: Path, received: dict[str, Any], change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in CONFIG
    # The app does not import: the file is checked before it is loaded.
    text = CONFIG.replace(old, new, 1).replace("cli_app:app", "no_such_module:app")
    config = _file(tmp_path, text)
    for command in ("engine", "worker"):
        status, output = _run([command, "--config", config])
        assert status == 2, output
        assert f"Error: {config}: {message}" in output, output
    assert received == {}


def test_a_missing_file_is_a_usage_error(tmp_path: Path, received: dict[str, Any]) -> None:
    status, output = _run(["engine", "--config", str(tmp_path / "none.toml")])
    assert status == 2
    assert "none.toml' does not exist" in output
    assert received == {}


def test_a_bad_keyring_in_the_file_is_named_without_its_keys(
    tmp_path: Path, received: dict[str, Any]
) -> None:
    config = _file(tmp_path, CONFIG.replace(f'codec_keys = "{KEY}"', 'codec_keys = "k1:secret"'))
    status, output = _run(["engine", "--config", config])
    assert status == 2
    assert "codec_keys of the config file" in output
    assert "secret" not in output.replace("codec_keys", "")


def test_every_option_of_open_engine_and_open_worker_has_a_key_or_a_reason() -> None:
    engine_keys = config_keys(_processes.engine_command).keys() | SECRET_KEYS.keys()
    for field in attrs.fields(EngineOptions):
        if field.name in ("codec", "signing"):
            # Given by their keyrings.
            assert field.name + "_keys" in SECRET_KEYS
        elif field.name == "console":
            assert {"console", "token", "http"} <= engine_keys
        else:
            assert field.name in engine_keys or field.name in PYTHON_ONLY, field.name
    worker_keys = config_keys(_processes.worker_command).keys() | SECRET_KEYS.keys()
    for name in inspect.signature(open_worker).parameters:
        if name in ("app", "broker"):
            continue
        if name == "signing":
            assert "signing_keys" in worker_keys
        else:
            assert name in worker_keys or name in PYTHON_ONLY, name


def test_the_configuration_page_holds_the_generated_key_tables(tmp_path: Path) -> None:
    page = _options_docs.PAGE.read_text(encoding="utf-8")
    assert _config_docs.with_tables(page) == page, "run: python -m trio_durable._cli._config_docs"
    for section, command in _config_docs.SECTIONS.items():
        begin, end = _config_docs.markers(section)
        table = page.split(begin, 1)[1].split(end, 1)[0]
        keys = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
        assert keys == [*config_keys(command), *SECRET_KEYS]
    stale = tmp_path / "configuration.md"
    stale.write_text(page.replace("| `lease_ttl` | `--lease-ttl`", "| `lease_seconds` | `--x`"))
    assert _config_docs.main(["--check", "--page", str(stale)]) == 1
    assert _config_docs.main(["--page", str(stale)]) == 0
    assert stale.read_text() == page
    stale.write_text("# No markers\n")
    assert _config_docs.main(["--page", str(stale)]) == 2


async def test_an_engine_process_runs_from_a_file_alone(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    config = tmp_path / "orders.toml"
    config.write_text(
        f'app = "cli_app:app"\n[store]\nurl = "{store}"\n'
        '[engine]\nengine_id = "filed"\nserve = ["cli"]\nmigrate = true\nlog_format = "json"\n'
    )
    async with cli_process(["engine"], env={"TRIO_DURABLE_CONFIG": str(config)}) as engine:
        ready = await engine.wait_for("engine filed ready")
        assert '"level": "INFO"' in ready
        await start_runs(store, [("hello-c", "hello", ("c",)), ("double-c", "doubled", (4,))])
        runs = await wait_for_runs(store, ["hello-c", "double-c"])
        assert "8 from " in str(runs["double-c"].output)
        assert await engine.stop(signal.SIGTERM) == 0
