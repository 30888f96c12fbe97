"""The store SDK: what a store of your own implements, and what it applies.

A store is an object with the methods of `Store`. The engine writes through
`Store.apply`, a batch of the operations below applied atomically, one
result each; `StoreHelpers` writes the single-operation forms of the
protocol on top of it. `trio_durable.testing.conformance.check_store` shows
that a store behaves as the engine needs, and a package makes its URL scheme
known under the entry-point group ``trio_durable.stores``. See
docs/writing-a-store.md.
"""

from ._base._records import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._base._records import CheckpointKind as CheckpointKind
from ._base._records import CheckpointStatus as CheckpointStatus
from ._base._records import FanCounts as FanCounts
from ._base._records import QueueDepth as QueueDepth
from ._base._records import RunFilter as RunFilter
from ._base._records import RunStamp as RunStamp
from ._base._records import RunStatus as RunStatus
from ._base._records import StoredValue as StoredValue
from ._base._records import Webhook as Webhook
from ._base._run_records import RunRecord as RunRecord
from ._stores._base import ChangeFeed as ChangeFeed
from ._stores._base import RunDeleter as RunDeleter
from ._stores._base import RunWatch as RunWatch
from ._stores._base import Store as Store
from ._stores._base import StoreStatistics as StoreStatistics
from ._stores._base import TurnState as TurnState
from ._stores._base import WriteConflict as WriteConflict
from ._stores._base import run_due_at as run_due_at
from ._stores._codec import CodecStore as CodecStore
from ._stores._helpers import StoreHelpers as StoreHelpers
from ._stores._hook_ops import CreateWebhook as CreateWebhook
from ._stores._hook_ops import DeleteBreakpoint as DeleteBreakpoint
from ._stores._hook_ops import KeepSetting as KeepSetting
from ._stores._hook_ops import PauseStep as PauseStep
from ._stores._hook_ops import PutBreakpoint as PutBreakpoint
from ._stores._hook_ops import ResumeStep as ResumeStep
from ._stores._hook_ops import UseWebhook as UseWebhook
from ._stores._ops import QUEUE_SLOT as QUEUE_SLOT
from ._stores._ops import QUEUED as QUEUED
from ._stores._ops import WHOLE_RUN as WHOLE_RUN
from ._stores._ops import AdmitToQueue as AdmitToQueue
from ._stores._ops import Announce as Announce
from ._stores._ops import AnnounceKind as AnnounceKind
from ._stores._ops import ClaimCheckpoint as ClaimCheckpoint
from ._stores._ops import CreateRun as CreateRun
from ._stores._ops import DeleteCheckpoints as DeleteCheckpoints
from ._stores._ops import DeliverSignal as DeliverSignal
from ._stores._ops import LockRun as LockRun
from ._stores._ops import Op as Op
from ._stores._ops import PutCheckpoint as PutCheckpoint
from ._stores._ops import PutValue as PutValue
from ._stores._ops import ReleaseQueueSlot as ReleaseQueueSlot
from ._stores._ops import ReleaseRun as ReleaseRun
from ._stores._ops import RemoveSignalWaiter as RemoveSignalWaiter
from ._stores._ops import RescheduleCheckpoint as RescheduleCheckpoint
from ._stores._ops import SettleCheckpoint as SettleCheckpoint
from ._stores._ops import UpdateRun as UpdateRun
from ._stores._ops import WaitSignal as WaitSignal
from ._stores._ops import queue_slot_record as queue_slot_record
from ._stores._record_ops import ClaimRecord as ClaimRecord
from ._stores._record_ops import DeleteRecords as DeleteRecords
from ._stores._record_ops import PutRecord as PutRecord
from ._stores._record_ops import SettleRecord as SettleRecord

__all__ = [
    "ClaimRecord",
    "DeleteRecords",
    "PutRecord",
    "RunRecord",
    "SettleRecord",
    "Webhook",
    "UseWebhook",
    "ResumeStep",
    "PutBreakpoint",
    "PauseStep",
    "KeepSetting",
    "DeleteBreakpoint",
    "CreateWebhook",
    "TERMINAL_STATUSES",
    "WHOLE_RUN",
    "QUEUE_SLOT",
    "QUEUED",
    "queue_slot_record",
    "AdmitToQueue",
    "Announce",
    "AnnounceKind",
    "ChangeFeed",
    "CheckpointKind",
    "CheckpointStatus",
    "ClaimCheckpoint",
    "CodecStore",
    "CreateRun",
    "DeleteCheckpoints",
    "DeliverSignal",
    "FanCounts",
    "LockRun",
    "Op",
    "PutCheckpoint",
    "PutValue",
    "QueueDepth",
    "ReleaseQueueSlot",
    "ReleaseRun",
    "RemoveSignalWaiter",
    "RescheduleCheckpoint",
    "RunDeleter",
    "RunFilter",
    "RunStamp",
    "RunStatus",
    "RunWatch",
    "SettleCheckpoint",
    "Store",
    "StoreHelpers",
    "StoreStatistics",
    "StoredValue",
    "TurnState",
    "UpdateRun",
    "WaitSignal",
    "WriteConflict",
    "run_due_at",
]
