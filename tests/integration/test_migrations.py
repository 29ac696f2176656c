"""Alembic is the only schema path: one head, and the models match the migrations."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from service.db.database import make_engine
from service.db.migrate import alembic_config, current_revisions, head_revisions, script_location
from service.db.models import Base
from service.stream.fold_store import encode_batch
from service.stream.sql.columns import LabeledRows
from tests.integration.conftest import BACKEND


def _revision_module(filename: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        filename, f"{script_location()}/versions/{filename}"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REVISION_0010 = _revision_module("0010_hot_table_storage.py")
THRESHOLDS = REVISION_0010.THRESHOLDS
REVISION_0013 = _revision_module("0013_bucket_fillfactor.py")
REVISION_0019 = _revision_module("0019_unfolded_label_batches.py")


def _storage_options(engine: Engine, tables: list[str]) -> dict[str, dict[str, str]]:
    """``ALTER TABLE ... SET`` parameters of ``tables`` (PostgreSQL's ``reloptions``)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT relname, reloptions FROM pg_class WHERE relname = ANY(:names)"),
            {"names": tables},
        )
        return {
            name: dict(option.split("=", 1) for option in (reloptions or []))
            for name, reloptions in rows
        }


def _queue_storage(engine: Engine) -> dict[str, str]:
    """The storage parameters of the fold's queue and (prefixed ``toast.``) of its TOAST table."""
    with engine.connect() as connection:
        main, toast = connection.execute(
            text(
                "SELECT c.reloptions, t.reloptions FROM pg_class c"
                " JOIN pg_class t ON t.oid = c.reltoastrelid"
                " WHERE c.relname = 'unfolded_label_batches'"
            )
        ).one()
    return dict(option.split("=", 1) for option in (main or [])) | {
        f"toast.{k}": v for k, v in (option.split("=", 1) for option in (toast or []))
    }


def test_single_head() -> None:
    assert len(head_revisions()) == 1


def test_a_new_revision_imports(tmp_path: Path) -> None:
    """``alembic revision`` renders the script template into a module that imports, on top of
    the current head (run on a copy of the migrations, so the real history is untouched)."""
    copy = tmp_path / "migrations"
    shutil.copytree(script_location(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    config = alembic_config()
    config.set_main_option("script_location", str(copy))
    script = command.revision(config, message="add a column", rev_id="9999")
    assert script is not None and not isinstance(script, list)
    spec = importlib.util.spec_from_file_location("revision_9999", script.path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.revision == "9999"
    assert (module.down_revision,) == head_revisions()
    assert callable(module.upgrade) and callable(module.downgrade)


def test_database_is_at_head(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert current_revisions(engine) == head_revisions()
    finally:
        engine.dispose()


def test_models_and_migrations_agree(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


@pytest.mark.skipif(BACKEND != "postgresql", reason="autovacuum is PostgreSQL's")
def test_hot_tables_carry_their_storage_settings(fresh_empty_url: str) -> None:
    """Revision 0010 sets every threshold and column compression it lists, and its downgrade
    takes them all back."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0010")
    engine = make_engine(fresh_empty_url)

    def options() -> dict[str, dict[str, str]]:
        return _storage_options(engine, list(THRESHOLDS))

    def compression() -> dict[tuple[str, str], str]:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT c.relname, a.attname, a.attcompression FROM pg_attribute a"
                    " JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname = ANY(:names)"
                    " AND a.attname = ANY(:columns)"
                ),
                {
                    "names": list(REVISION_0010.LZ4_COLUMNS),
                    "columns": [c for cs in REVISION_0010.LZ4_COLUMNS.values() for c in cs],
                },
            )
            return {(table, column): method for table, column, method in rows}

    lz4_columns = [(t, c) for t, cs in REVISION_0010.LZ4_COLUMNS.items() for c in cs]
    try:
        assert options() == THRESHOLDS
        assert compression() == {key: "l" for key in lz4_columns}
        command.downgrade(config, "0009")
        assert options() == {name: {} for name in THRESHOLDS}
        assert compression() == {key: "" for key in lz4_columns}
    finally:
        engine.dispose()


@pytest.mark.skipif(BACKEND != "postgresql", reason="fillfactor is PostgreSQL's")
def test_bucket_pages_keep_room_for_new_row_versions(fresh_empty_url: str) -> None:
    """Revision 0013 sets the fillfactor of every table it lists, beside the thresholds of
    revision 0010, and its downgrade takes it back."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "head")
    engine = make_engine(fresh_empty_url)
    tables = list(REVISION_0013.FILLFACTOR)
    try:
        expected = {
            table: {**THRESHOLDS.get(table, {}), "fillfactor": str(percent)}
            for table, percent in REVISION_0013.FILLFACTOR.items()
        }
        assert _storage_options(engine, tables) == expected
        command.downgrade(config, "0012")
        assert _storage_options(engine, tables) == {t: THRESHOLDS.get(t, {}) for t in tables}
    finally:
        engine.dispose()


@pytest.mark.skipif(BACKEND != "postgresql", reason="collations are PostgreSQL's")
def test_hot_table_keys_compare_byte_by_byte(fresh_empty_url: str) -> None:
    """After revision 0012 every primary-key column of text type in the hot tables (and no
    other column) is ``COLLATE "C"``, as the models declare; its downgrade takes them back."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "head")
    engine = make_engine(fresh_empty_url)
    tables = ("predictions", "labels", "calibration_buckets")

    def c_collated() -> set[tuple[str, str]]:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT c.relname, a.attname FROM pg_attribute a"
                    " JOIN pg_class c ON c.oid = a.attrelid"
                    " JOIN pg_collation k ON k.oid = a.attcollation"
                    " WHERE c.relname = ANY(:tables) AND k.collname = 'C'"
                ),
                {"tables": list(tables)},
            )
            return {(table, column) for table, column in rows}

    declared = {
        (table, column.name)
        for table in tables
        for column in Base.metadata.tables[table].primary_key.columns
        if column.type.python_type is str
    }
    try:
        assert c_collated() == declared
        assert ("labels", "id") in declared and ("calibration_buckets", "slice") in declared
        command.downgrade(config, "0011")
        assert c_collated() == set()
    finally:
        engine.dispose()


def test_the_keyed_audit_head_table_comes_and_goes_with_its_revision(fresh_empty_url: str) -> None:
    """Revision 0015 adds ``audit_head`` (one row at most) and its downgrade drops it, leaving
    the audit events as they were."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0015")
    engine = make_engine(fresh_empty_url)
    try:
        assert {c["name"] for c in inspect(engine).get_columns("audit_head")} == {
            "id",
            "events",
            "seq",
            "sha256",
            "key_id",
            "mac",
        }
        row = "INSERT INTO audit_head (id, events, seq, sha256, key_id, mac) VALUES "
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text(row + "(2, 1, 1, 'h', 'k', 'm')"))
        with engine.begin() as connection:
            connection.execute(text(row + "(1, 1, 1, 'h', 'k', 'm')"))
        command.downgrade(config, "0014")
        assert "audit_head" not in inspect(engine).get_table_names()
        assert "audit_events" in inspect(engine).get_table_names()
        command.upgrade(config, "head")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM audit_head")).scalar() == 0
    finally:
        engine.dispose()


def test_incremental_refresh_tables_come_and_go_with_revision_0016(fresh_empty_url: str) -> None:
    """Revision 0016 adds the change markers, the refresh states and the readings' expiry
    beside the readings a database already holds; its downgrade takes them all back."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0015")
    engine = make_engine(fresh_empty_url)

    def inspected() -> tuple[set[str], set[str], set[str]]:
        schema = inspect(engine)
        tables = set(schema.get_table_names())
        readings = {c["name"] for c in schema.get_columns("stored_readings")}
        expositions = {c["name"] for c in schema.get_columns("stored_expositions")}
        return tables, readings, expositions

    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    'INSERT INTO stored_readings (model, cohort, "window", contract_id,'
                    " contract_version, computed_at, \"values\") VALUES ('m', 'all', '24h',"
                    " 'c', 1, '2026-12-01 00:00:00', '{}')"
                )
            )
        command.upgrade(config, "0016")
        tables, readings, expositions = inspected()
        assert {"bucket_changes", "refresh_states"} <= tables
        assert "stale_at" in readings and {"model_times", "body_sha256"} <= expositions
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT model, stale_at FROM stored_readings")).all()
        assert [tuple(row) for row in kept] == [("m", None)]
        command.downgrade(config, "0015")
        tables, readings, expositions = inspected()
        assert not {"bucket_changes", "refresh_states"} & tables
        assert "stale_at" not in readings and not {"model_times", "body_sha256"} & expositions
    finally:
        engine.dispose()


def test_the_label_fold_tables_come_and_go_with_revision_0018(fresh_empty_url: str) -> None:
    """Revision 0018 adds the fold's queue (keyed like ``labels``) and its marks; its
    downgrade drops both."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0016")
    engine = make_engine(fresh_empty_url)
    try:
        assert not {"unfolded_labels", "label_fold_marks"} & set(inspect(engine).get_table_names())
        command.upgrade(config, "0018")
        schema = inspect(engine)
        assert {"unfolded_labels", "label_fold_marks"} <= set(schema.get_table_names())
        assert schema.get_pk_constraint("unfolded_labels")["constrained_columns"] == ["model", "id"]
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO unfolded_labels (model, id, label, queued_at)"
                    " VALUES ('m', 'a', 1, '2026-12-01 00:00:00')"
                )
            )
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO unfolded_labels (model, id, label, queued_at)"
                    " VALUES ('m', 'a', 2, '2026-12-01 00:00:01')"
                )
            )
        command.downgrade(config, "0016")
        assert not {"unfolded_labels", "label_fold_marks"} & set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_revision_0019_moves_queued_labels_both_ways(fresh_empty_url: str) -> None:
    """Upgrading, a label queued one row per label waits again for the sweep of waiting labels
    (which joins and counts it); downgrading, every label of a queued batch is queued one row
    per label again."""
    config = alembic_config(fresh_empty_url)
    command.upgrade(config, "0018")
    engine = make_engine(fresh_empty_url)
    label = (
        "INSERT INTO labels (model, id, label, ts, received_at, joined)"
        " VALUES ('m', :id, 1, '2026-12-01 00:00:00', '2026-12-01 00:00:00', true)"
    )
    try:
        with engine.begin() as connection:
            connection.execute(text(label), [{"id": "queued"}, {"id": "counted"}])
            connection.execute(
                text(
                    "INSERT INTO unfolded_labels (model, id, label, queued_at)"
                    " VALUES ('m', 'queued', 1, '2026-12-01 00:00:00')"
                )
            )
        command.upgrade(config, "0019")
        tables = set(inspect(engine).get_table_names())
        assert "unfolded_label_batches" in tables and "unfolded_labels" not in tables
        if BACKEND == "postgresql":
            assert _queue_storage(engine) == REVISION_0019.QUEUE_STORAGE
        with engine.connect() as connection:
            joined = dict(connection.execute(text("SELECT id, joined FROM labels")).all())
        assert {k: bool(v) for k, v in joined.items()} == {"queued": False, "counted": True}

        queued = LabeledRows(
            ids=["a", "b", "c"],
            contract_ids=["c1"] * 3,
            seconds=np.array([1, 2, 3]),
            slices=["[]"] * 3,
            inputs=[b"x"] * 3,
            labels=np.array([0, 2, 1]),
            names=[None] * 3,
        )
        with engine.begin() as connection:
            for model, payload in (("m", encode_batch(queued)), ("n", encode_batch(queued))):
                connection.execute(
                    text(
                        "INSERT INTO unfolded_label_batches (model, queued_at, labels, payload)"
                        " VALUES (:model, '2026-12-01 00:00:00', 3, :payload)"
                    ),
                    {"model": model, "payload": payload},
                )
        command.downgrade(config, "0018")
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT model, id, label FROM unfolded_labels ORDER BY model, id")
            ).all()
        assert [tuple(r) for r in rows] == [
            (m, i, v) for m in ("m", "n") for i, v in (("a", 0), ("b", 2), ("c", 1))
        ]
        assert "unfolded_label_batches" not in set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
