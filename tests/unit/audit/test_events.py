"""Audit event payloads: stored details keep their keys and order, and old details still read."""

from __future__ import annotations

import json

from service.audit.events import (
    AuditResealed,
    ContractFitted,
    ContractRegistered,
    ContractRetired,
    GateDecided,
    KeyEnabled,
    PredictionsPruned,
    StatusChanged,
    TokenCreated,
    TokenRevoked,
)


def test_each_payload_stores_the_json_its_kind_always_stored() -> None:
    written = [
        (
            ContractRegistered(3, "ab" * 32, "supplied"),
            '{"version": 3, "content_sha256": "' + "ab" * 32 + '", "baseline_source": "supplied"}',
        ),
        (
            ContractRetired(2, "superseded", {"reason": "superseded"}, "cd" * 32),
            '{"version": 2, "reason": "superseded", "retirement": {"reason": "superseded"}, '
            '"retirement_sha256": "' + "cd" * 32 + '"}',
        ),
        (
            GateDecided("d-1", "fail", ["max_ece"], "e" * 64, "f" * 64),
            '{"decision_id": "d-1", "decision": "fail", "failed_checks": ["max_ece"], '
            '"evidence_sha256": "' + "e" * 64 + '", "policy_sha256": "' + "f" * 64 + '"}',
        ),
        (
            StatusChanged("all", "24h", "ok", "alert", ["ece over max_ece"]),
            '{"cohort": "all", "window": "24h", "from": "ok", "to": "alert", '
            '"reasons": ["ece over max_ece"]}',
        ),
        (
            PredictionsPruned("2026-01-01T00:00:00+00:00", 5, 4, 1),
            '{"cutoff": "2026-01-01T00:00:00+00:00", "predictions": 5, "labels": 4, '
            '"pending_labels_expired": 1}',
        ),
        (TokenCreated("ci", "gate"), '{"name": "ci", "role": "gate"}'),
        (TokenRevoked("ci", "gate", 2), '{"name": "ci", "role": "gate", "sessions_ended": 2}'),
        (KeyEnabled("k2", None), '{"key_id": "k2", "previous_key_id": null}'),
        (
            AuditResealed("lost head", "no head", None, {"events": 3, "seq": 3, "sha256": "0"}),
            '{"reason": "lost head", "problem": "no head", "previous_head": null, '
            '"log_end": {"events": 3, "seq": 3, "sha256": "0"}}',
        ),
    ]
    for payload, stored in written:
        assert json.dumps(payload.details()) == stored
        assert type(payload).read(json.loads(stored)) == payload


def test_the_types_are_the_stored_event_types() -> None:
    assert [kind.TYPE for kind in (ContractRegistered, ContractFitted, StatusChanged)] == [
        "contract_registered",
        "contract_fitted",
        "drift_status_changed",
    ]


def test_details_written_before_a_field_existed_read_it_as_none() -> None:
    retired = ContractRetired.read({"version": 1, "reason": "old"})
    assert retired == ContractRetired(version=1, reason="old")
    assert json.dumps(retired.details()) == '{"version": 1, "reason": "old"}'
