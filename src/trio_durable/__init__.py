"""trio-durable: durable workflows for Trio applications.

Write workflows as plain ``async def``s; every step, timer, signal and child
run is checkpointed in a store, so a run survives crashes and restarts and
resumes by replay on any engine.
"""

# The store SDK, so that `td.stores.CodecStore` needs no import of its own.
from . import stores as stores
from ._app import App as App
from ._app import FlowQueue as FlowQueue
from ._app import Retry as Retry
from ._app import Step as Step
from ._app import Workflow as Workflow
from ._blobs import BlobInfo as BlobInfo
from ._blobs import BlobStore as BlobStore
from ._blobs import LocalBlobStore as LocalBlobStore
from ._brokers import open_broker as open_broker
from ._brokers._base import Broker as Broker
from ._brokers._base import BrokerError as BrokerError
from ._brokers._base import BrokerUnavailable as BrokerUnavailable
from ._brokers._base import WorkerDescriptor as WorkerDescriptor
from ._brokers._memory import BrokerFaults as BrokerFaults
from ._brokers._memory import MemoryBroker as MemoryBroker
from ._client import Client as Client
from ._client import open_client as open_client
from ._clock import Clock as Clock
from ._codec import AesGcmCodec as AesGcmCodec
from ._codec import PayloadCodec as PayloadCodec
from ._context import Context as Context
from ._controls import RateLimit as RateLimit
from ._controls import RunControls as RunControls
from ._current import StepInfo as StepInfo
from ._current import current_step as current_step
from ._engine import Engine as Engine
from ._entities import EntityRef as EntityRef
from ._entity_defs import exclusive as exclusive
from ._entity_defs import shared as shared
from ._events import EventReceipt as EventReceipt
from ._events import EventRecord as EventRecord
from ._exceptions import BlobCorrupted as BlobCorrupted
from ._exceptions import BlobNotFound as BlobNotFound
from ._exceptions import BreakpointNotFoundError as BreakpointNotFoundError
from ._exceptions import Cancelled as Cancelled
from ._exceptions import CodecError as CodecError
from ._exceptions import ContinueAsNewError as ContinueAsNewError
from ._exceptions import EngineClosedError as EngineClosedError
from ._exceptions import EntityError as EntityError
from ._exceptions import EntityKeyError as EntityKeyError
from ._exceptions import EventConflictError as EventConflictError
from ._exceptions import FatalError as FatalError
from ._exceptions import ForkPointError as ForkPointError
from ._exceptions import GatherError as GatherError
from ._exceptions import GatherFailure as GatherFailure
from ._exceptions import InvalidArgumentsError as InvalidArgumentsError
from ._exceptions import InvalidRunStateError as InvalidRunStateError
from ._exceptions import InvalidURLError as InvalidURLError
from ._exceptions import LeaseLostError as LeaseLostError
from ._exceptions import NonDeterminismError as NonDeterminismError
from ._exceptions import QueryFailed as QueryFailed
from ._exceptions import RegistrationError as RegistrationError
from ._exceptions import RemoteStepError as RemoteStepError
from ._exceptions import RunCancelled as RunCancelled
from ._exceptions import RunConflictError as RunConflictError
from ._exceptions import RunFailed as RunFailed
from ._exceptions import RunNotFoundError as RunNotFoundError
from ._exceptions import ScheduleError as ScheduleError
from ._exceptions import ScheduleNotFoundError as ScheduleNotFoundError
from ._exceptions import SearchAttributeError as SearchAttributeError
from ._exceptions import SerializationError as SerializationError
from ._exceptions import SignalTargetNotFoundError as SignalTargetNotFoundError
from ._exceptions import SignalTimeout as SignalTimeout
from ._exceptions import StepFailed as StepFailed
from ._exceptions import StoreError as StoreError
from ._exceptions import TrioDurableError as TrioDurableError
from ._exceptions import UnknownEntityError as UnknownEntityError
from ._exceptions import UnknownHandlerError as UnknownHandlerError
from ._exceptions import UnknownWorkflowError as UnknownWorkflowError
from ._exceptions import UnsubscribedEventWarning as UnsubscribedEventWarning
from ._exceptions import UpdateFailed as UpdateFailed
from ._exceptions import UpdateRejected as UpdateRejected
from ._exceptions import UsageError as UsageError
from ._exceptions import WebhookError as WebhookError
from ._exceptions import WebhookNotFoundError as WebhookNotFoundError
from ._exceptions import WebhookUsedError as WebhookUsedError
from ._fleet import Disagreement as Disagreement
from ._fleet import Fleet as Fleet
from ._handle import RunHandle as RunHandle
from ._handoff import UnservedRoute as UnservedRoute
from ._keyring import Keyring as Keyring
from ._keyring import KeyringError as KeyringError
from ._observe import Event as Event
from ._on_error import OnError as OnError
from ._on_error import lineage as lineage
from ._on_error import parent_of as parent_of
from ._open_engine import open_engine as open_engine
from ._open_worker import open_worker as open_worker
from ._options import ConsoleOptions as ConsoleOptions
from ._records import Breakpoint as Breakpoint
from ._records import Checkpoint as Checkpoint
from ._records import ErrorInfo as ErrorInfo
from ._records import Mark as Mark
from ._records import PausedStep as PausedStep
from ._records import Run as Run
from ._runtime import EngineStatistics as EngineStatistics
from ._schedule_spec import ScheduleInfo as ScheduleInfo
from ._search_values import SearchRange as SearchRange
from ._stores import open_store as open_store
from ._stores._base import Store as Store
from ._stores._base import StoreStatistics as StoreStatistics
from ._stores._memory import MemoryStore as MemoryStore
from ._views import FanPage as FanPage
from ._views import FanStats as FanStats
from ._views import HistoryEntry as HistoryEntry
from ._views import Retention as Retention
from ._views import RunDetail as RunDetail
from ._views import RunHistory as RunHistory
from ._views import RunPage as RunPage
from ._worker import Worker as Worker
from ._worker import WorkerStatistics as WorkerStatistics

__version__ = "0.1.0"

__all__ = [
    "AesGcmCodec",
    "App",
    "BlobCorrupted",
    "BlobInfo",
    "BlobNotFound",
    "BlobStore",
    "Breakpoint",
    "BreakpointNotFoundError",
    "Broker",
    "BrokerError",
    "BrokerFaults",
    "BrokerUnavailable",
    "Cancelled",
    "Checkpoint",
    "Client",
    "Clock",
    "CodecError",
    "ConsoleOptions",
    "Context",
    "ContinueAsNewError",
    "current_step",
    "Disagreement",
    "Engine",
    "EngineClosedError",
    "EngineStatistics",
    "EntityError",
    "EntityKeyError",
    "EntityRef",
    "ErrorInfo",
    "Event",
    "EventConflictError",
    "EventReceipt",
    "EventRecord",
    "exclusive",
    "FanPage",
    "FanStats",
    "FatalError",
    "Fleet",
    "FlowQueue",
    "ForkPointError",
    "GatherError",
    "GatherFailure",
    "HistoryEntry",
    "InvalidArgumentsError",
    "InvalidRunStateError",
    "InvalidURLError",
    "Keyring",
    "KeyringError",
    "LeaseLostError",
    "lineage",
    "LocalBlobStore",
    "Mark",
    "MemoryBroker",
    "MemoryStore",
    "NonDeterminismError",
    "OnError",
    "open_broker",
    "open_client",
    "open_engine",
    "open_store",
    "open_worker",
    "parent_of",
    "PausedStep",
    "PayloadCodec",
    "QueryFailed",
    "RateLimit",
    "RegistrationError",
    "RemoteStepError",
    "Retention",
    "Retry",
    "Run",
    "RunCancelled",
    "RunConflictError",
    "RunControls",
    "RunDetail",
    "RunFailed",
    "RunHandle",
    "RunHistory",
    "RunNotFoundError",
    "RunPage",
    "ScheduleError",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SearchAttributeError",
    "SearchRange",
    "SerializationError",
    "shared",
    "SignalTargetNotFoundError",
    "SignalTimeout",
    "Step",
    "StepFailed",
    "StepInfo",
    "Store",
    "StoreError",
    "StoreStatistics",
    "TrioDurableError",
    "UnknownEntityError",
    "UnknownHandlerError",
    "UnknownWorkflowError",
    "UnservedRoute",
    "UnsubscribedEventWarning",
    "UpdateFailed",
    "UpdateRejected",
    "UsageError",
    "WebhookError",
    "WebhookNotFoundError",
    "WebhookUsedError",
    "Worker",
    "WorkerDescriptor",
    "WorkerStatistics",
    "Workflow",
]
