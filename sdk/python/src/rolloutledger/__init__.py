"""rolloutledger: the Python client of the rolloutledger event ledger.

Rollout workers append what happened (typed, validated facts, sent in
order with safe retries); trainers long-poll sealed batches, read their
samples as NumPy arrays and report their gradient steps. See README.md.
"""

from .client import Ack, Ledger
from .errors import (
    AuthenticationError,
    DigestMismatchError,
    InfrastructureError,
    LedgerError,
    NotFoundError,
    PermissionDeniedError,
    RejectedError,
    ResumeError,
    UnavailableError,
    ValidationError,
)
from .facts import (
    FACT_TYPES,
    AttemptFailed,
    AttemptFinished,
    AttemptStarted,
    ContextCompacted,
    Event,
    Fact,
    Gate,
    GradientApplied,
    GroupClosed,
    GroupStarted,
    PolicyPublished,
    RewardComputed,
    RunConfig,
    RunStarted,
    TaskRegistered,
    ToolCalled,
    Divergence,
    EngineInfo,
    KnownVersionSegment,
    Sampling,
    TurnGenerated,
    VersionSegment,
    VocabularyRegistered,
    default_fact_version,
)
from .ids import uuid7
from .samples import Batch, Sample, SampleBatch
from .trainer import TrainerState
from .validation import validate_body
from .worker import Attempt
from . import vocabulary  # noqa: F401  (rolloutledger.vocabulary: register an engine's vocabulary)

__version__ = "0.1.0"

__all__ = [
    "Ack",
    "Attempt",
    "AuthenticationError",
    "AttemptFailed",
    "AttemptFinished",
    "AttemptStarted",
    "Batch",
    "ContextCompacted",
    "DigestMismatchError",
    "Divergence",
    "EngineInfo",
    "Event",
    "FACT_TYPES",
    "Fact",
    "Gate",
    "GradientApplied",
    "GroupClosed",
    "GroupStarted",
    "InfrastructureError",
    "KnownVersionSegment",
    "Ledger",
    "LedgerError",
    "NotFoundError",
    "PermissionDeniedError",
    "PolicyPublished",
    "RejectedError",
    "ResumeError",
    "RewardComputed",
    "RunConfig",
    "RunStarted",
    "Sample",
    "SampleBatch",
    "Sampling",
    "TaskRegistered",
    "ToolCalled",
    "TrainerState",
    "TurnGenerated",
    "UnavailableError",
    "VersionSegment",
    "ValidationError",
    "VocabularyRegistered",
    "default_fact_version",
    "uuid7",
    "validate_body",
]
