"""The options of `open_engine`, declared once.

`EngineOptions` holds an engine's settings, checked once by attrs
validators: `open_engine` builds one of its keyword arguments and the
engine's parts read the checked values from it. Each of
its fields also says, in its ``declared`` metadata, what the option means
and its flag of ``trio-durable engine``, if any; `ENGINE_RESOURCES` says
the same of the parameters that are no setting (the app, the store, the
broker). From that declaration the ``engine`` command builds its flags
(`_cli._processes`) and `_options_docs` writes the table of
docs/configuration.md; tests/test_options_declared_once.py checks that
`open_engine`'s signature, which stays written out for readers and type
checkers, says the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeGuard, final

import attrs

from .._base._bounds import is_finite
from .._base._exceptions import UsageError
from .._base._keyring import Keyring
from .._base._records import DEFAULT_TRACEBACK_LIMIT
from .._payloads._blobs import DEFAULT_BLOB_GRACE, DEFAULT_BLOB_THRESHOLD
from ._builds import check_build_id
from ._options import (
    DEFAULT_TIMER_BATCH_SIZE,
    ConsoleOptions,
    at_least_zero,
    check_id,
    check_secret,
    concurrency,
    keyring_or_none,
    positive_finite,
    tracing_or_provider,
)
from ._views import Retention

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .._payloads._blobs import BlobStore
    from .._payloads._codec import PayloadCodec


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _engine_id(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_id(attribute.name, value)


def _build_id(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        check_build_id(value)


def _retention(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Retention):
        raise UsageError(f"retention must be a td.Retention or None, not {value!r}")


def _redispatch(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    after: object
    limit: object
    try:
        after, limit = value  # type: ignore[misc]
    except (TypeError, ValueError):
        raise UsageError(f"remote_redispatch must be (seconds, maximum), not {value!r}") from None
    if not _is_number(after) or not is_finite(after) or after <= 0:
        raise UsageError(f"remote_redispatch seconds must be positive, not {after!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"remote_redispatch maximum must be an integer >= 0, not {limit!r}")


def _batch_size(value: object) -> int:
    """A usable batch size: a non-finite or < 1 value means the default."""
    if _is_number(value) and is_finite(value) and value >= 1:
        return int(value)
    return DEFAULT_TIMER_BATCH_SIZE


@final
@attrs.frozen(kw_only=True)
class Declared:
    """How an option of `open_engine` is shown to its readers, written once
    (as ``metadata=declared(...)`` of an `EngineOptions` field).

    Attributes:
      doc: What it means, as the table of docs/configuration.md says it
        (Markdown, one paragraph).
      cli: Its flag of ``trio-durable engine``, or None if it has none.
      shown: Its default as that table shows it, where the default's
        repr does not say it (None: the repr).
      accepts: The annotation of `open_engine`'s parameter, where it takes
        more than the field keeps (a converter makes the field's type of
        it); None: the field's.
    """

    doc: str
    cli: str | None = None
    shown: str | None = None
    accepts: str | None = None


def declared(
    doc: str, *, cli: str | None = None, shown: str | None = None, accepts: str | None = None
) -> dict[str, Declared]:
    """The metadata of an `EngineOptions` field: see `Declared`."""
    return {"declared": Declared(doc=doc, cli=cli, shown=shown, accepts=accepts)}


@final
@attrs.frozen(kw_only=True)
class EngineOption:
    """One parameter of `open_engine`, as declared.

    Attributes:
      name: The parameter's name.
      annotation: Its annotation, as written in the signature.
      default: Its default, or `attrs.NOTHING` if it has none.
      declared: What its readers are shown.
    """

    name: str
    annotation: str
    default: object
    declared: Declared


ENGINE_RESOURCES: Final = (
    EngineOption(
        name="app",
        annotation="App",
        default=attrs.NOTHING,
        declared=Declared(
            doc="The `td.App` whose workflows and steps this engine executes.", shown="(required)"
        ),
    ),
    EngineOption(
        name="store",
        annotation="str | Store",
        default="memory://",
        declared=Declared(doc="A store URL (below) or an open `td.Store` to share.", cli="--store"),
    ),
    EngineOption(
        name="broker",
        annotation="str | Broker",
        default="memory://",
        declared=Declared(
            doc="A broker URL ([below](#broker-urls)) or an open `td.Broker` to share. Remote"
            " steps' tasks go out and results come back through it. The default names the"
            " process-wide memory broker, shared by every engine and worker of the process that"
            " uses the default while it is open.",
            cli="--broker",
        ),
    ),
)
"""The parameters of `open_engine` that are no setting but what it runs
on: the app, the store and the broker (never in `EngineOptions`)."""


def engine_options() -> dict[str, EngineOption]:
    """Every parameter of `open_engine` as declared, by name: the
    resources, then the fields of `EngineOptions` in their order."""
    options = {option.name: option for option in ENGINE_RESOURCES}
    for field in attrs.fields(EngineOptions):
        shown: Declared = field.metadata["declared"]
        options[field.name] = EngineOption(
            name=field.name,
            annotation=shown.accepts or str(field.type),
            default=field.default,
            declared=shown,
        )
    return options


@final
@attrs.frozen(kw_only=True)
class EngineOptions:
    """An engine's settings, as `open_engine` takes them (its docstring says
    what each means), but for the resources it runs on (`ENGINE_RESOURCES`).

    Validated when made: a bad value raises `UsageError`, quoting it as the
    caller gave it. Seconds are kept as floats, those of
    ``remote_redispatch`` too; a ``timer_batch_size`` that is not a usable
    size means the default. ``engine_id`` is None when it is to be derived
    from the seed. `open_engine` checks ``serve``, ``capabilities``,
    ``console``, ``codec`` and the blob options itself, as it opens.
    """

    engine_id: str | None = attrs.field(
        default=None,
        validator=_engine_id,
        metadata=declared(
            "The owner name written on the leases this engine takes. Engines sharing a store"
            " need distinct ids. Letters, digits and `_.-:@`, 1 to 255 characters.",
            cli="--engine-id",
            shown="`engine-<8 hex digits>`, drawn from the seeded random source",
        ),
    )
    seed: int | None = attrs.field(
        default=None,
        metadata=declared(
            "Seeds the engine's `random.Random`: the default `engine_id`, run ids made without"
            " `run_id`, retry jitter, and the shuffle of due runs.",
            shown="`None` (seeded from the OS)",
            cli="--seed",
        ),
    )
    wall_clock: Callable[[], float] = attrs.field(
        default=time.time,
        metadata=declared(
            "Read once, when the engine opens, to anchor durable time to the epoch"
            " ([concepts.md](concepts.md#durable-time)). Tests pass a constant.",
            shown="`time.time`",
        ),
    )
    timer_batch_size: int = attrs.field(
        default=DEFAULT_TIMER_BATCH_SIZE,
        converter=_batch_size,
        metadata=declared(
            "How many due runs the poller takes from the store at a time. A non-finite value or"
            " one below 1 silently means 500; a fraction is truncated.",
            accepts="float",
            cli="--timer-batch-size",
        ),
    )
    lease_ttl: float = attrs.field(
        default=30.0,
        validator=positive_finite,
        metadata=declared(
            "Seconds a run's lease lasts. It is renewed every `lease_ttl / 3` while a turn"
            " runs; after a crash, other engines take the run over once it lapses.",
            cli="--lease-ttl",
        ),
    )
    reconcile_interval: float = attrs.field(
        default=60.0,
        validator=positive_finite,
        metadata=declared(
            "The safety net of a store that processes other than this one write: SQLite under"
            " Trio's own clock, PostgreSQL, a store of your own that is no"
            " `trio_durable.stores.ChangeFeed` (see [below](#when-engines-look-at-the-store))."
            " There it is the longest the poller goes without scanning the store for due runs"
            " (it bounds how late this engine notices a timer or a lease that an engine which"
            " died left behind), and the period of the reconcile pass, which wakes runs whose"
            " wake-up was lost (see [operations.md](operations.md)). On a store whose writers"
            " all live in this process (a `MemoryStore`; a SQLite store under a clock other than"
            " Trio's own, such as `MockClock`) the store tells the engine of every change"
            " instead, so nothing is scanned on a timer: a reconcile pass comes"
            " `reconcile_interval` after a run may have stalled, and never while nothing"
            " changes. While a `drain()` waits on steps this engine sent to its own worker, a"
            " pass also looks them up in the store, in case an engine in another process settled"
            " their results (see [concepts.md](concepts.md#drain)).",
            cli="--reconcile-interval",
        ),
    )
    result_poll_interval: float = attrs.field(
        default=1.0,
        validator=positive_finite,
        metadata=declared(
            "For a store that announces no writes (one of your own that is no `RunWatch`):"
            " seconds between store reads in `engine.result`, `engine.get_event` and"
            " `engine.update` while the run has not ended on this engine. The built-in stores"
            " announce every run's end and every published value"
            " ([client.md](client.md#how-wake-ups-work)), so there these calls read the run only"
            " when told, and never on a timer; the option is still accepted and checked for"
            " them, and changes nothing.",
            cli="--result-poll-interval",
        ),
    )
    max_recoveries: int = attrs.field(
        default=10,
        validator=at_least_zero,
        metadata=declared(
            "How many times a run may be taken over from engines whose lease lapsed; the next"
            " takeover marks it `dead`. `0` marks a run dead at its first takeover.",
            cli="--max-recoveries",
        ),
    )
    serve: Sequence[str] = attrs.field(
        default=(),
        metadata=declared(
            'Group routes (`"payments"`, `"payments@acme"`) for a worker that runs inside the'
            " engine's nursery, on its broker, as `open_worker` would. Each must name a group"
            " that some remote step of `app` has. Empty: no embedded worker.",
            cli="--serve",
        ),
    )
    worker_concurrency: int = attrs.field(
        default=16,
        validator=concurrency,
        metadata=declared(
            "How many tasks the embedded worker runs at once (and its prefetch per queue). A"
            " positive integer.",
            cli="--concurrency",
        ),
    )
    capabilities: Sequence[str] = attrs.field(
        default=(),
        metadata=declared(
            "What the embedded worker offers to steps with `requires=`.",
            cli="--capabilities",
        ),
    )
    build_id: str | None = attrs.field(
        default=None,
        validator=_build_id,
        metadata=declared(
            "The build the embedded worker announces and takes the tasks of (a broker-safe"
            " token; [deployments.md](deployments.md)). None: the app's registration hash."
            " Anything else raises `td.UsageError`.",
            cli="--build-id",
            shown="`None` (the registration hash)",
        ),
    )
    remote_redispatch: tuple[float, int] | None = attrs.field(
        default=None,
        validator=_redispatch,
        metadata=declared(
            "`(seconds, maximum)`: a remote step with no result `seconds` after it was sent is"
            " sent again with its attempt count raised, at most `maximum` times; then it fails"
            " with code `lost` ([guide.md](guide.md#lost-steps)). It applies to steps already"
            " out when the engine opens, whoever sent them. `seconds` must be positive and"
            " finite, `maximum` an integer of at least 0. `trio-durable engine"
            " --remote-redispatch SECONDS,MAXIMUM`.",
            cli="--remote-redispatch",
            shown="`None` (off)",
        ),
    )
    blocked_recheck: float = attrs.field(
        default=5.0,
        validator=positive_finite,
        metadata=declared(
            "Seconds between checks of a step parked because no live worker offers what it"
            " `requires` (code `blocked`). Announcements read for the check are reused for at"
            " most `min(1, blocked_recheck / 2)` seconds. A waiter in a flow-control queue's"
            " line (a step, or a run waiting for admission under a concurrency key or an"
            " entity's exclusivity) also looks at the line again now and then, first this long"
            " after it joined the line (a run: 5 s after its start): the release that lets it in"
            " wakes it at once, so a look only rescues a waiter whose wake was lost, and each"
            " waiter's looks back off, the next one after as long as it has waited (at least"
            " `blocked_recheck`, at most 60 s, or `blocked_recheck` if that is longer). A"
            " thousand calls in one line cost a few looks each, and a lost wake is found within"
            " 60 s.",
            cli="--blocked-recheck",
        ),
    )
    traceback_limit: int = attrs.field(
        default=DEFAULT_TRACEBACK_LIMIT,
        validator=at_least_zero,
        metadata=declared(
            "How many characters of a traceback the engine records with each failed attempt of"
            " a local step and with a failed run's error, and keeps of what workers send with a"
            " failed remote attempt; the embedded worker sends at most that many too. `0`"
            " records none. A longer traceback keeps its start and its end"
            " ([failure-handling.md](failure-handling.md#tracebacks-and-logs)). An integer of at"
            " least 0.",
            cli="--traceback-limit",
        ),
    )
    retention: Retention | None = attrs.field(
        default=None,
        validator=_retention,
        metadata=declared(
            "A `td.Retention(completed=, failed=, cancelled=, terminated=, dead=, events=7 days, batch=500,"
            " interval=60.0)`: prune ended runs older than an age per status, with everything"
            " that goes with them, and event records older than `events`, in batches, every"
            " `interval` seconds, in a task of the engine's nursery"
            " ([queries.md](queries.md#retention); every kind of record in"
            " [operations.md](operations.md#retention-what-the-store-keeps-and-what-removes-it))."
            " None keeps every run and every record. `trio-durable engine --retention"
            " completed=7d,failed=30d,...` (the same names; ages like `90s`, `15m`, `12h`, `7d`,"
            " `2w`, or `forever`).",
            cli="--retention",
        ),
    )
    tracing: bool | TracerProvider = attrs.field(
        default=False,
        validator=tracing_or_provider,
        metadata=declared(
            "OpenTelemetry spans for turns, local step attempts and remote steps from dispatch"
            " to settle (and the embedded worker's executions): `True` for the global tracer"
            " provider, or a `TracerProvider`. Needs the `otel` extra; anything but a bool or a"
            " tracer provider, or `True` without `opentelemetry-api`, raises `td.UsageError`"
            " ([tracing.md](tracing.md)).",
        ),
    )
    metrics_interval: float = attrs.field(
        default=15.0,
        validator=positive_finite,
        metadata=declared(
            "Seconds between reads of the flow-control queues' depths from the store, for the"
            " queue gauges of `engine.metrics()` ([operations.md](operations.md#metrics)). Only"
            " an engine whose app registers queues reads them.",
            cli="--metrics-interval",
        ),
    )
    console: ConsoleOptions | None = attrs.field(
        default=None,
        metadata=declared(
            "A `td.ConsoleOptions` ([below](#consoleoptions)): serve the console (JSON API,"
            " pages, `/metrics`) from the engine's nursery, listening before the block is"
            " entered, at `engine.console_url` ([http-api.md](http-api.md)). Its values are"
            " checked when it is made (`UsageError`).",
        ),
    )
    # Never shown: a repr in a log must not give away what derives tokens.
    webhook_secret: bytes | None = attrs.field(
        default=None,
        converter=check_secret,
        repr=False,
        metadata=declared(
            "The secret webhook tokens are derived from: bytes or a string of at least 16"
            " bytes, the same on every engine of a fleet. None: a random secret is made once and"
            " kept in the store, which then holds what derives the tokens"
            " ([webhooks-and-breakpoints.md](webhooks-and-breakpoints.md)). A shorter secret, or"
            " one of another type, raises `td.UsageError`.",
            accepts="bytes | str | None",
            cli="--webhook-secret",
        ),
    )
    codec: PayloadCodec | None = attrs.field(
        default=None,
        metadata=declared(
            "A payload codec, such as `td.AesGcmCodec(keyring)`: the store is wrapped in a"
            " `td.stores.CodecStore`, which keeps every payload encrypted at rest"
            " ([payload-codecs.md](payload-codecs.md)). `open_client(codec=)` takes the same."
            " Anything but a codec or None raises `td.UsageError`, and so does a codec with a"
            " store that is a `CodecStore` already.",
        ),
    )
    blobs: BlobStore | str | os.PathLike[str] | None = attrs.field(
        default=None,
        metadata=declared(
            "A `td.BlobStore`, or a directory path for a `td.LocalBlobStore`: payloads longer"
            " than `blob_threshold` characters are kept there, and rows and broker messages"
            " carry references; pruning deletes the blobs only pruned runs referred to, once"
            " `blob_grace` seconds old ([large-payloads.md](large-payloads.md)). None keeps"
            " payloads in the rows.",
            cli="--blobs",
        ),
    )
    blob_threshold: int = attrs.field(
        default=DEFAULT_BLOB_THRESHOLD,
        metadata=declared(
            "The length in characters over which a payload goes to `blobs` (so a task or a"
            " result with payloads up to it stays under 64 KiB).",
            shown="`32768` (32 KiB)",
            cli="--blob-threshold",
        ),
    )
    blob_grace: float = attrs.field(
        default=DEFAULT_BLOB_GRACE,
        metadata=declared(
            "Seconds a blob written (or written again) is kept by pruning although no run"
            " refers to it, so that a pruning pass does not delete a blob a writer is about to"
            " refer to again ([large-payloads.md](large-payloads.md)).",
            shown="`3600.0` (an hour)",
            cli="--blob-grace",
        ),
    )
    signing: Keyring | None = attrs.field(
        default=None,
        validator=keyring_or_none,
        metadata=declared(
            "A `td.Keyring`: sign every task with its current key, settle only results signed"
            " by one of its keys (the embedded worker does the same); anything but a keyring or"
            " None raises `td.UsageError` ([message-signing.md](message-signing.md)).",
        ),
    )

    def __attrs_post_init__(self) -> None:
        # Checked as given (an error quotes the value as the caller wrote
        # it), then kept as floats.
        for name in (
            "lease_ttl",
            "reconcile_interval",
            "result_poll_interval",
            "blocked_recheck",
            "metrics_interval",
        ):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.remote_redispatch is not None:
            after, limit = self.remote_redispatch
            object.__setattr__(self, "remote_redispatch", (float(after), limit))
