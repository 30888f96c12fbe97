"""trio-durable: durable workflows for Trio applications.

Write workflows as plain ``async def``s; every step, timer, signal and child
run is checkpointed in a store, so a run survives crashes and restarts and
resumes by replay on any engine.
"""

# The store SDK, so that `td.stores.CodecStore` needs no import of its own.
from . import stores as stores
from ._base._clock import Clock as Clock
from ._base._controls import RateLimit as RateLimit
from ._base._controls import RunControls as RunControls
from ._base._current import StepInfo as StepInfo
from ._base._current import current_step as current_step
from ._base._exceptions import BlobCorrupted as BlobCorrupted
from ._base._exceptions import BlobNotFound as BlobNotFound
from ._base._exceptions import BreakpointNotFoundError as BreakpointNotFoundError
from ._base._exceptions import Cancelled as Cancelled
from ._base._exceptions import CodecError as CodecError
from ._base._exceptions import ContinueAsNewError as ContinueAsNewError
from ._base._exceptions import EncryptedHistoryError as EncryptedHistoryError
from ._base._exceptions import EngineClosedError as EngineClosedError
from ._base._exceptions import EntityError as EntityError
from ._base._exceptions import EntityKeyError as EntityKeyError
from ._base._exceptions import EventConflictError as EventConflictError
from ._base._exceptions import FatalError as FatalError
from ._base._exceptions import ForkPointError as ForkPointError
from ._base._exceptions import GatherError as GatherError
from ._base._exceptions import GatherFailure as GatherFailure
from ._base._exceptions import HistoryError as HistoryError
from ._base._exceptions import InvalidArgumentsError as InvalidArgumentsError
from ._base._exceptions import InvalidRunStateError as InvalidRunStateError
from ._base._exceptions import InvalidURLError as InvalidURLError
from ._base._exceptions import LeaseLostError as LeaseLostError
from ._base._exceptions import NonDeterminismError as NonDeterminismError
from ._base._exceptions import QueryFailed as QueryFailed
from ._base._exceptions import RegistrationError as RegistrationError
from ._base._exceptions import RemoteStepError as RemoteStepError
from ._base._exceptions import RunCancelled as RunCancelled
from ._base._exceptions import RunConflictError as RunConflictError
from ._base._exceptions import RunFailed as RunFailed
from ._base._exceptions import RunNotFoundError as RunNotFoundError
from ._base._exceptions import RunTerminated as RunTerminated
from ._base._exceptions import ScheduleError as ScheduleError
from ._base._exceptions import ScheduleNotFoundError as ScheduleNotFoundError
from ._base._exceptions import SchemaVersionError as SchemaVersionError
from ._base._exceptions import SearchAttributeError as SearchAttributeError
from ._base._exceptions import SerializationError as SerializationError
from ._base._exceptions import SignalTargetNotFoundError as SignalTargetNotFoundError
from ._base._exceptions import SignalTimeout as SignalTimeout
from ._base._exceptions import StepFailed as StepFailed
from ._base._exceptions import StoreError as StoreError
from ._base._exceptions import TrioDurableError as TrioDurableError
from ._base._exceptions import UnknownEntityError as UnknownEntityError
from ._base._exceptions import UnknownHandlerError as UnknownHandlerError
from ._base._exceptions import UnknownWorkflowError as UnknownWorkflowError
from ._base._exceptions import UnsubscribedEventWarning as UnsubscribedEventWarning
from ._base._exceptions import UpdateFailed as UpdateFailed
from ._base._exceptions import UpdateRejected as UpdateRejected
from ._base._exceptions import UsageError as UsageError
from ._base._exceptions import WebhookError as WebhookError
from ._base._exceptions import WebhookNotFoundError as WebhookNotFoundError
from ._base._exceptions import WebhookUsedError as WebhookUsedError
from ._base._keyring import Keyring as Keyring
from ._base._keyring import KeyringError as KeyringError
from ._base._observe import Event as Event
from ._base._on_error import OnError as OnError
from ._base._on_error import lineage as lineage
from ._base._on_error import parent_of as parent_of
from ._base._records import Breakpoint as Breakpoint
from ._base._records import Checkpoint as Checkpoint
from ._base._records import ErrorInfo as ErrorInfo
from ._base._records import Mark as Mark
from ._base._records import PausedStep as PausedStep
from ._base._records import Run as Run
from ._base._search_values import SearchRange as SearchRange
from ._brokers import open_broker as open_broker
from ._brokers._base import Broker as Broker
from ._brokers._base import BrokerError as BrokerError
from ._brokers._base import BrokerUnavailable as BrokerUnavailable
from ._brokers._base import WorkerDescriptor as WorkerDescriptor
from ._brokers._memory import BrokerFaults as BrokerFaults
from ._brokers._memory import MemoryBroker as MemoryBroker
from ._features.deployments._deployments import Deployment as Deployment
from ._features.deployments._deployments import DeploymentError as DeploymentError
from ._features.entities._entities import EntityRef as EntityRef
from ._features.entities._entity_defs import exclusive as exclusive
from ._features.entities._entity_defs import shared as shared
from ._features.events._events import EventReceipt as EventReceipt
from ._features.events._events import EventRecord as EventRecord
from ._features.on_error._handoff import UnservedRoute as UnservedRoute
from ._features.schedules._schedule_spec import ScheduleInfo as ScheduleInfo
from ._front._app import App as App
from ._front._app import FlowQueue as FlowQueue
from ._front._app import Retry as Retry
from ._front._app import Step as Step
from ._front._app import Workflow as Workflow
from ._front._client import Client as Client
from ._front._client import open_client as open_client
from ._front._context import Context as Context
from ._front._engine import Engine as Engine
from ._front._front_bulk import BulkProgress as BulkProgress
from ._front._front_bulk import BulkReport as BulkReport
from ._front._front_bulk import RunSelection as RunSelection
from ._front._front_deployments import BuildStatus as BuildStatus
from ._front._front_deployments import DeploymentReport as DeploymentReport
from ._front._handle import RunHandle as RunHandle
from ._front._open_worker import open_worker as open_worker
from ._front._worker import Worker as Worker
from ._front._worker import WorkerStatistics as WorkerStatistics
from ._kernel._fleet import Disagreement as Disagreement
from ._kernel._fleet import Fleet as Fleet
from ._kernel._options import ConsoleOptions as ConsoleOptions
from ._kernel._runtime import EngineStatistics as EngineStatistics
from ._kernel._views import AttemptEntry as AttemptEntry
from ._kernel._views import FanPage as FanPage
from ._kernel._views import FanStats as FanStats
from ._kernel._views import HistoryEntry as HistoryEntry
from ._kernel._views import Retention as Retention
from ._kernel._views import RetriedHistory as RetriedHistory
from ._kernel._views import RunDetail as RunDetail
from ._kernel._views import RunHistory as RunHistory
from ._kernel._views import RunPage as RunPage
from ._payloads._blobs import BlobInfo as BlobInfo
from ._payloads._blobs import BlobStore as BlobStore
from ._payloads._blobs import LocalBlobStore as LocalBlobStore
from ._payloads._codec import AesGcmCodec as AesGcmCodec
from ._payloads._codec import PayloadCodec as PayloadCodec
from ._process._open_engine import open_engine as open_engine
from ._stores import open_store as open_store
from ._stores._base import Store as Store
from ._stores._base import StoreStatistics as StoreStatistics
from ._stores._memory import MemoryStore as MemoryStore

__version__ = "0.1.0"

__all__ = [
    "AesGcmCodec",
    "App",
    "AttemptEntry",
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
    "BuildStatus",
    "BulkProgress",
    "BulkReport",
    "Cancelled",
    "Checkpoint",
    "Client",
    "Clock",
    "CodecError",
    "ConsoleOptions",
    "Context",
    "ContinueAsNewError",
    "current_step",
    "Deployment",
    "DeploymentError",
    "DeploymentReport",
    "Disagreement",
    "EncryptedHistoryError",
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
    "HistoryError",
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
    "RetriedHistory",
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
    "RunSelection",
    "RunTerminated",
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
    "SchemaVersionError",
]
