"""``nanoslack.store.rows.Row``: a row class names its columns once; the SELECT list and the
reading of a fetched row both come from its fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
from sqlalchemy import Integer, MetaData, String

from nanoslack.store import schema
from nanoslack.store.rows import Row, insert_sql
from nanoslack.store.schema import Col, table


@dataclass(frozen=True, slots=True)
class LeaseLike:
    instance: str
    holder: str | None
    expires_at: float
    heartbeat_at: float | None


@dataclass(frozen=True, slots=True)
class Unknown:
    instance: str
    nickname: str


def test_the_select_list_is_the_fields_in_order_with_the_alias_and_joined_columns() -> None:
    rows = Row(LeaseLike, table="instance_leases", prefix="l.", columns={"heartbeat_at": "max(h.at)"})
    assert rows.sql == "l.instance, l.holder, l.expires_at, max(h.at)"


def test_a_fetched_row_is_converted_by_each_fields_annotation() -> None:
    rows = Row(LeaseLike, table="instance_leases")
    assert rows.read(("dana", None, "12.5", 3)) == LeaseLike("dana", None, 12.5, 3.0)
    assert rows.read(("dana", "pid-1", 1, None)) == LeaseLike("dana", "pid-1", 1.0, None)
    assert rows.first(None) is None
    assert rows.all([("a", None, 1, None), ("b", "x", 2, 2)])[1] == LeaseLike("b", "x", 2.0, 2.0)


def test_empty_fields_read_null_as_the_empty_value() -> None:
    rows = Row(LeaseLike, table="instance_leases", empty=("instance", "expires_at"))
    assert rows.read((None, None, None, None)) == LeaseLike("", None, 0.0, None)


def test_a_field_that_is_no_column_of_its_table_fails_when_the_module_loads() -> None:
    with pytest.raises(TypeError, match="instance_leases has no column nickname"):
        Row(Unknown, table="instance_leases")
    assert Row(Unknown, table="instance_leases", columns={"nickname": "'x'"}).sql == "instance, 'x'"


def test_a_field_of_another_type_needs_its_own_reader() -> None:
    @dataclass(frozen=True)
    class Listed:
        members: tuple[str, ...]

    with pytest.raises(TypeError, match="no reader"):
        Row(Listed)
    assert Row(Listed, convert={"members": lambda v: tuple(v.split(","))}).read(("a,b",)) == Listed(
        ("a", "b")
    )


def test_an_insert_names_the_rows_fields_less_skipped() -> None:
    rows = Row(LeaseLike, table="instance_leases")
    assert rows.insert(skip=("holder",), values={"heartbeat_at": ":now"}) == (
        "INSERT INTO instance_leases (instance, expires_at, heartbeat_at)"
        " VALUES (:instance, :expires_at, :now)"
    )
    assert insert_sql("users", ("id", "kind"), values={"kind": "'human'"}) == (
        "INSERT INTO users (id, kind) VALUES (:id, 'human')"
    )


def test_an_insert_of_a_column_its_table_lacks_fails_when_the_module_loads() -> None:
    with pytest.raises(TypeError, match="instance_leases has no column nickname"):
        insert_sql("instance_leases", ("instance", "nickname"))
    with pytest.raises(TypeError, match="needs the row's table"):
        Row(LeaseLike).insert()


def test_every_table_the_store_writes_is_declared_with_the_others() -> None:
    """The plain-SQL tables of old versions are declared in ``tables`` now, so rows of
    them are checked like every other's."""
    from nanoslack.store.schema import METADATA

    assert {"assistant_threads", "reply_drafts"} <= set(METADATA.tables)


@dataclass(frozen=True, slots=True)
class Pet:
    id: int
    name: Annotated[str, Col(unique=True)]
    owner: str | None
    legs: Annotated[int, Col(server_default="4")]


@dataclass(frozen=True)
class Listed:
    names: tuple[str, ...]


def test_a_row_class_declares_its_table_column_by_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """``schema.table``: one column per field, in order, typed and nullable by its annotation."""
    metadata = MetaData()
    monkeypatch.setattr(schema, "METADATA", metadata)
    table("pets", key=("id",))(Pet)
    pets = metadata.tables["pets"]
    assert [c.name for c in pets.columns] == ["id", "name", "owner", "legs"]
    assert isinstance(pets.c.id.type, Integer) and pets.c.id.primary_key
    assert isinstance(pets.c.name.type, String) and pets.c.name.unique and not pets.c.name.nullable
    assert pets.c.owner.nullable and not pets.c.legs.nullable
    assert pets.c.legs.server_default is not None


def test_a_field_no_column_type_fits_needs_its_stored_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "METADATA", MetaData())
    with pytest.raises(TypeError, match="no column type"):
        table("listed_things", key=("names",))(Listed)
    with pytest.raises(TypeError, match="is no field"):
        table("keyless_things", key=("id",))(LeaseLike)


def test_a_listing_that_extends_a_row_class_reads_its_table_and_the_joined_columns() -> None:
    from nanoslack.store.tables import RefusalRow

    rows = Row(RefusalRow, prefix="r.", columns={"platform_id": "m.platform_id"})
    assert rows.table == "sender_refusals"
    assert rows.sql.endswith("r.notified_at, m.platform_id")


def test_an_update_sets_checked_columns_where_the_primary_key_matches_unless_told() -> None:
    from nanoslack.store.rows import update_sql

    assert update_sql("inbox", {"status": "'done'", "finished_at": ":now"}, also="status = 'received'") == (
        "UPDATE inbox SET status = 'done', finished_at = :now"
        " WHERE instance = :instance AND channel = :channel AND ts = :ts AND status = 'received'"
    )
    assert Row(LeaseLike, table="instance_leases").update(["holder"], where=("instance",)) == (
        "UPDATE instance_leases SET holder = :holder WHERE instance = :instance"
    )
    with pytest.raises(TypeError, match="inbox has no column state"):
        update_sql("inbox", ["state"])
    with pytest.raises(TypeError, match="inbox has no column key"):
        update_sql("inbox", ["status"], where={"key": ":key"})
