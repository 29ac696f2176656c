"""Typed SQLAlchemy 2.0 models. ORM rows never leave the stores that read them (``*/store.py``,
``*_store.py``): they return domain objects."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from service.db.types import BigIntPK, UTCDateTime, byte_order_key

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def table_of(model: type[Base]) -> Table:
    """The Core ``Table`` behind a mapped class (typed, for bulk statements)."""
    return cast(Table, model.__table__)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime,
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class ApiToken(Base):
    """A bearer token; only its SHA-256 is stored."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint("role IN ('reader', 'ingest', 'gate', 'admin')", name="role"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(100))
    revoked_at: Mapped[datetime | None]


class UiSession(Base):
    """A review-page sign-in: the browser's cookie holds the id, this row only its SHA-256.

    ``token_id`` is the signing-in token's row (NULL for the bootstrap admin, which has none);
    ``token_binding`` ties the session to that token (``service.auth.tokens.session_binding``), so a
    revoked token, or a changed bootstrap token, ends its sessions at once. ``principal`` and
    ``role`` are what the page shows; the role that counts is the token's, looked up per
    request.
    """

    __tablename__ = "ui_sessions"
    __table_args__ = (
        Index("ix_ui_sessions_token_id", "token_id"),
        Index("ix_ui_sessions_expires_at", "expires_at"),
    )

    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[int | None] = mapped_column(
        BigIntPK, ForeignKey("api_tokens.id", ondelete="CASCADE")
    )
    token_binding: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(100))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class ModelRecord(Base):
    """One row per model name: the version counter that keeps contract versions gap-free."""

    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    latest_version: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime]


class ContractRecord(Base):
    """An immutable calibration contract; ``content_sha256`` covers every other column but seq."""

    __tablename__ = "contracts"
    __table_args__ = (
        UniqueConstraint("model", "version"),
        CheckConstraint("task IN ('multiclass', 'binary')", name="task"),
        CheckConstraint("version >= 1", name="version_positive"),
        Index("ix_contracts_model_created_at", "model", "created_at"),
    )

    seq: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(36), unique=True)
    model: Mapped[str] = mapped_column(String(200), ForeignKey("models.name"))
    version: Mapped[int]
    checkpoint: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(String(16))
    classes: Mapped[list[Any]]
    calibrator: Mapped[dict[str, Any]]
    objective: Mapped[str] = mapped_column(String(32))
    population: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(Text)
    data_window: Mapped[dict[str, Any]]
    split: Mapped[dict[str, Any]]
    bin_edges: Mapped[list[Any]]
    baseline: Mapped[dict[str, Any]]
    policy: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(100))
    content_sha256: Mapped[str] = mapped_column(String(64))


class ContractRetirement(Base):
    """The retirement event of a contract; the contract row itself never changes."""

    __tablename__ = "contract_retirements"

    contract_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("contracts.id"), primary_key=True
    )
    reason: Mapped[str] = mapped_column(Text)
    retired_at: Mapped[datetime]
    retired_by: Mapped[str] = mapped_column(String(100))


class AuditEventRecord(Base):
    """An append-only audit event: who did what, when, to which model or contract."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_model_seq", "model", "seq"),
        Index("ix_audit_events_type_seq", "type", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    ts: Mapped[datetime]
    type: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    contract_id: Mapped[str | None] = mapped_column(String(36))
    details: Mapped[dict[str, Any]]
    prev_sha256: Mapped[str] = mapped_column(String(64))
    sha256: Mapped[str] = mapped_column(String(64))


class AuditHeadRecord(Base):
    """The keyed head of the audit log (one row, written only under ``CALMON_AUDIT_KEY``): how
    many events the log holds and the last one's ``seq`` and ``sha256``, with an HMAC over them
    (``service.audit.head``), so deleting events from the end is seen."""

    __tablename__ = "audit_head"
    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    events: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str] = mapped_column(String(64))


class GateDecisionRecord(Base):
    """A stored gate decision: the policy it applied, every check, and the evidence it saw."""

    __tablename__ = "gate_decisions"
    __table_args__ = (
        Index("ix_gate_decisions_model_decided_at", "model", "decided_at"),
        Index("ix_gate_decisions_contract_id", "contract_id"),
        CheckConstraint("decision IN ('pass', 'fail')", name="decision"),
    )

    seq: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(36), unique=True)
    contract_id: Mapped[str] = mapped_column(String(36), ForeignKey("contracts.id"))
    model: Mapped[str] = mapped_column(String(200))
    decided_at: Mapped[datetime]
    decided_by: Mapped[str] = mapped_column(String(100))
    decision: Mapped[str] = mapped_column(String(8))
    policy: Mapped[dict[str, Any]]
    checks: Mapped[list[Any]]
    evidence: Mapped[dict[str, Any]]
    policy_sha256: Mapped[str] = mapped_column(String(64))
    evidence_sha256: Mapped[str] = mapped_column(String(64))


class PredictionRecord(Base):
    """One prediction as received: raw model output and the contract it was bound to.

    Immutable once stored (labels live in ``labels``). The primary key ``(model, id)`` is both
    the idempotency key (a retried id is compared with the stored row: same ``ts``, cohort and
    ``inputs`` is a duplicate, anything else a conflict) and the one index a label probes.
    Retention deletes by ``ts`` through its BRIN index. ``cohort`` holds the cohort's canonical
    JSON text; ``inputs`` the raw logits (K float64, little-endian) or the one binary score;
    ``slices`` the JSON list of capped slices it counts in.
    """

    __tablename__ = "predictions"
    __table_args__ = (Index("ix_predictions_ts", "ts", postgresql_using="brin"),)

    model: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    id: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    ts: Mapped[datetime]
    contract_id: Mapped[str] = mapped_column(String(36))
    cohort: Mapped[dict[str, Any]]
    slices: Mapped[str] = mapped_column(Text)
    inputs: Mapped[bytes] = mapped_column(LargeBinary)
    received_at: Mapped[datetime]


class PruneRecord(Base):
    """One run of ``calmon prune``: predictions and labels with event time before ``cutoff``
    were deleted (``predictions`` and ``labels`` count them).

    The latest ``cutoff`` is the retention horizon: predictions older than it are refused,
    since their stored rows are gone and a retry could not be told from a new prediction.
    """

    __tablename__ = "prunes"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    cutoff: Mapped[datetime]
    pruned_at: Mapped[datetime]
    predictions: Mapped[int] = mapped_column(BigInteger)
    labels: Mapped[int] = mapped_column(BigInteger)


class LabelRecord(Base):
    """The true label of a prediction, as received (insert-only: a label is never changed).

    ``ts`` is when the outcome became known. ``joined`` tells whether the label has been counted
    in the statistics with its prediction; a label that arrives first waits with ``joined``
    false until its prediction is stored.

    A label means a class of the contract its prediction is bound to. ``label_name`` is the class
    name the label was sent with (NULL for a label sent as a class index). ``label`` is the class
    index under the prediction's contract once joined; while a label sent by name waits, it is
    the name's index under the newest contract version that knows the name, and the name is
    judged again by the prediction's contract when the prediction arrives.
    """

    __tablename__ = "labels"
    __table_args__ = (
        Index("ix_labels_ts", "ts", postgresql_using="brin"),
        Index(
            "ix_labels_waiting",
            "model",
            postgresql_where=text("NOT joined"),
            sqlite_where=text("NOT joined"),
        ),
    )

    model: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    id: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    label: Mapped[int] = mapped_column(SmallInteger)
    label_name: Mapped[str | None] = mapped_column(Text)
    ts: Mapped[datetime]
    received_at: Mapped[datetime]
    joined: Mapped[bool]


class UnfoldedLabelBatch(Base):
    """Joined labels of one request acknowledged but not yet counted in their buckets: they
    wait for the fold.

    A late label whose 5-minute bucket few other labels of its request share is queued instead
    of rewriting its buckets for itself (``service.stream.fold``). ``payload`` is an Arrow IPC
    stream of the request's ``labels`` queued labels, one row each with what the fold counts
    (``fold_store.encode_batch``), so the fold reads no prediction. The fold deletes the row in
    the transaction that adds its labels to their buckets, so each label is counted exactly
    once; ``queued_at`` is when the labels were acknowledged.
    """

    __tablename__ = "unfolded_label_batches"
    __table_args__ = (Index("ix_unfolded_label_batches_model", "model", "seq"),)

    seq: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(byte_order_key(200))
    queued_at: Mapped[datetime]
    labels: Mapped[int]
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class LabelFoldMark(Base):
    """When the fold last counted waiting labels of a model."""

    __tablename__ = "label_fold_marks"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    folded_at: Mapped[datetime]


class CohortValue(Base):
    """A cohort value admitted under the per-key cap of a model."""

    __tablename__ = "cohort_values"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(64), primary_key=True)


class CalibrationBucket(Base):
    """Additive statistics of one (model, slice, resolution, bucket, contract).

    ``resolution`` is ``5m`` or ``1h``; ``bucket_start`` the bucket's UTC start by
    prediction event time. ``stats`` packs the labeled predictions' ``CalibrationStats`` and
    their refit-temperature knot sums as float64 (see ``service.calibration.packing``);
    ``confidence_counts`` counts every prediction, labeled or not, per confidence bin (float64,
    M values); ``unlabeled_expected_correct`` and ``unlabeled_expected_square`` sum what each
    still-unlabeled prediction expects its correctness to be, and its square.
    """

    __tablename__ = "calibration_buckets"
    __table_args__ = (CheckConstraint("resolution IN ('5m', '1h')", name="resolution"),)

    model: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    slice: Mapped[str] = mapped_column(byte_order_key(200), primary_key=True)
    resolution: Mapped[str] = mapped_column(byte_order_key(2), primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(primary_key=True)
    contract_id: Mapped[str] = mapped_column(byte_order_key(36), primary_key=True)
    n_predictions: Mapped[int] = mapped_column(BigInteger, default=0)
    n_labeled: Mapped[int] = mapped_column(BigInteger, default=0)
    unlabeled_expected_correct: Mapped[float] = mapped_column(Float, default=0.0)
    unlabeled_expected_square: Mapped[float] = mapped_column(Float, default=0.0)
    confidence_counts: Mapped[bytes | None] = mapped_column(LargeBinary)
    stats: Mapped[bytes | None] = mapped_column(LargeBinary)


class BucketChange(Base):
    """A (model, slice) whose buckets were written since the refresher last read its marker.

    Every bucket write upserts the row in its own transaction and bumps ``token``
    (``service.stream.bucket_store``); the refresher deletes a row only while its ``token`` is
    still the one it read, so a write it did not see keeps the slice marked. ``slice`` ``*``
    marks every slice of the model (its buckets were deleted).
    """

    __tablename__ = "bucket_changes"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    slice: Mapped[str] = mapped_column(String(200), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)


class RefreshState(Base):
    """What a model's stored readings were computed from, and what of them is exported.

    ``inputs_key`` fingerprints the model's contract set, the refreshed windows and the series
    budget; ``exported`` lists the slices refreshed and exported (``all`` first), ``unexported``
    counts the model's other slices; ``status`` is the worst stored status (None before any
    reading) and ``severity`` its rank (higher is worse); ``fragment`` holds the model's
    Prometheus sample lines, one text per metric family (``service.export.collector``), as
    rendered at ``rendered_at``.
    """

    __tablename__ = "refresh_states"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    inputs_key: Mapped[str] = mapped_column(Text)
    exported: Mapped[list[Any]]
    unexported: Mapped[int]
    status: Mapped[str | None] = mapped_column(String(32))
    severity: Mapped[int] = mapped_column(SmallInteger)
    fragment: Mapped[list[Any]]
    rendered_at: Mapped[datetime]


class StoredReading(Base):
    """The latest reading of one (model, cohort slice, window), recomputed when its inputs
    change.

    ``values`` holds the gauge values (ECE and its interval, NLL, Brier, accuracy, counts,
    drift...) as computed by ``service.export.refresher``; every replica serves the same
    numbers from here. ``stale_at`` is when the trailing window's edge passes a bucket holding
    data (its start the first such bucket inside, or its end the first one after it): from
    then on the reading must be recomputed even without new writes (None: never by time).
    """

    __tablename__ = "stored_readings"
    __table_args__ = (Index("ix_stored_readings_stale_at", "stale_at"),)

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    cohort: Mapped[str] = mapped_column(String(200), primary_key=True)
    window: Mapped[str] = mapped_column(String(16), primary_key=True)
    contract_id: Mapped[str] = mapped_column(String(36))
    contract_version: Mapped[int]
    computed_at: Mapped[datetime]
    values: Mapped[dict[str, Any]]
    stale_at: Mapped[datetime | None]


class StoredExposition(Base):
    """The Prometheus text of the calibration gauges, assembled by the refresher at the end of
    each cycle (``computed_at``).

    ``model_times`` holds ``{"models": [...], "behind": {model: epoch seconds}}``: every model
    of the fleet and, for a model whose readings are not current as of ``computed_at`` (its
    refresh failed, or it has none yet), since when its served readings are current;
    ``body_sha256`` the SHA-256 of ``body`` (hex).
    """

    __tablename__ = "stored_expositions"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    computed_at: Mapped[datetime]
    model_times: Mapped[dict[str, Any] | None]
    body_sha256: Mapped[str | None] = mapped_column(String(64))


class RefreshLease(Base):
    """Who may run the periodic refresh, until when: one refresher at a time across replicas."""

    __tablename__ = "refresh_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[datetime]


class MaintenanceTask(Base):
    """Work a migration leaves for ``calmon migrate`` to run with the application's code.

    ``rebuild_buckets`` recomputes every bucket from the stored predictions and labels when
    the statistics a bucket keeps change. While a task is pending the service is not ready.
    """

    __tablename__ = "maintenance_tasks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    requested_at: Mapped[datetime]


class RequestKeyRecord(Base):
    """An ``Idempotency-Key`` a client sent with an audited write, and what that write made:
    the same key sent again gets the same result instead of a second write
    (``service.audit.request_keys``)."""

    __tablename__ = "request_keys"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64))
    request_sha256: Mapped[str] = mapped_column(String(64))
    result_id: Mapped[str] = mapped_column(String(36))
    created_at: Mapped[datetime]
