"""A row class says its columns once (``tables``, declared with ``schema.table``):
``Row(SomeRow)`` gives the SELECT list of the class's fields (in their order), a reader
that makes an instance of one fetched row, converting each value by the field's
annotation, and the INSERT and UPDATE statements of its table. All come from the class's
fields, so a column added to the row class is created, selected, read and written
without another word.

The reader is compiled once per class into one plain function (the hot path reads turn,
message and outbox rows for every message: a loop over converters would cost more than
the hand-written mapping it replaces).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from nanoslack.store.schema import METADATA, table_of

T = TypeVar("T")

# How a value of each annotation is read: as the hand-written mappings did, one call a
# value; ``empty`` fields read NULL as the type's empty value (a column a migration
# added without a default, a hand edit).
_READ = {str: "str({v})", int: "int({v})", float: "float({v})", bool: "bool({v})"}
_READ_EMPTY = {
    str: "('' if {v} is None else str({v}))",
    int: "(0 if {v} is None else int({v}))",
    float: "(0.0 if {v} is None else float({v}))",
    bool: "bool({v})",
}
# A text column comes back as str or None from both drivers: taken as it is.
_READ_OPTIONAL = {
    str: "{v}",
    int: "(None if {v} is None else int({v}))",
    float: "(None if {v} is None else float({v}))",
    bool: "(None if {v} is None else bool({v}))",
}


class Row(Generic[T]):
    """The columns of ``cls`` and how a fetched row becomes one.

    ``table``: the table whose columns the fields are, by default the one ``cls`` (or
    the row class it extends) declares (checked: a field that is no column of it is an
    error at import, not a wrong query at run time); ``empty``: fields
    whose NULL reads as "" or 0; ``prefix``: the
    table's alias in a join (``"a."``); ``columns``: SQL for a field that is not a plain
    column of the table (a joined table's, a subquery); ``convert``: a reader for a
    field whose annotation is none of str, int, float, bool (or those or None)."""

    __slots__ = ("cls", "names", "read", "sql", "table")

    def __init__(
        self,
        cls: type[T],
        *,
        table: str | None = None,
        prefix: str = "",
        columns: Mapping[str, str] | None = None,
        convert: Mapping[str, Callable[[Any], Any]] | None = None,
        empty: Sequence[str] = (),
    ) -> None:
        columns = columns or {}
        convert = convert or {}
        self.cls = cls
        if table is None and (declared := table_of(cls)) is not None:
            table = declared.name
        self.table = table
        self.names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        if table is not None:
            _check_columns(table, [n for n in self.names if n not in columns])
        self.sql = ", ".join(columns.get(n, f"{prefix}{n}") for n in self.names)
        self.read: Callable[[Sequence[Any]], T] = _compile(cls, self.names, convert, empty)

    def insert(self, *, skip: Sequence[str] = (), values: Mapping[str, str] | None = None) -> str:
        """``insert_sql`` of the row's own table for its fields, less ``skip`` (the
        table's own id, columns left to their defaults or NULL)."""
        if self.table is None:
            raise TypeError(f"{self.cls.__name__}: insert needs the row's table")
        return insert_sql(self.table, [n for n in self.names if n not in skip], values=values)

    def update(
        self,
        assign: Sequence[str] | Mapping[str, str],
        *,
        where: Sequence[str] | Mapping[str, str] | None = None,
        also: str = "",
    ) -> str:
        """``update_sql`` of the row's own table."""
        if self.table is None:
            raise TypeError(f"{self.cls.__name__}: update needs the row's table")
        return update_sql(self.table, assign, where=where, also=also)

    def all(self, rows: Sequence[Sequence[Any]]) -> list[T]:
        read = self.read
        return [read(r) for r in rows]

    def first(self, row: Sequence[Any] | None) -> T | None:
        return None if row is None else self.read(row)


def insert_sql(table: str, columns: Sequence[str], *, values: Mapping[str, str] | None = None) -> str:
    """``INSERT INTO table (a, b) VALUES (:a, :b)`` for ``columns`` of ``table`` (checked
    against it, as a row class's fields are); ``values`` gives the SQL of a column that
    is not bound by its own name (a literal, ``:now``). A clause after it (ON CONFLICT,
    RETURNING) is the caller's to append."""
    values = values or {}
    _check_columns(table, columns)
    bound = ", ".join(values.get(c, f":{c}") for c in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({bound})"


def update_sql(
    table: str,
    assign: Sequence[str] | Mapping[str, str],
    *,
    where: Sequence[str] | Mapping[str, str] | None = None,
    also: str = "",
) -> str:
    """``UPDATE table SET a = :a WHERE k = :k AND also``: ``assign`` and ``where`` name
    columns of ``table`` (checked against it), each bound by its own name, or map a
    column to its SQL (``{"status": "'sent'", "sent_at": ":now"}``); ``where`` is the
    table's primary key unless given; ``also``: a further condition (a guard on the old
    value, ``status = 'queued'``). A clause after it (RETURNING) is the caller's to append."""
    sets = _pairs(table, assign)
    if where is None:
        where = [c.name for c in METADATA.tables[table].primary_key.columns]
    conditions = [f"{c} = {v}" for c, v in _pairs(table, where)] + ([also] if also else [])
    return f"UPDATE {table} SET {', '.join(f'{c} = {v}' for c, v in sets)}" + (
        f" WHERE {' AND '.join(conditions)}" if conditions else ""
    )


def _pairs(table: str, columns: Sequence[str] | Mapping[str, str]) -> list[tuple[str, str]]:
    pairs = list(columns.items()) if isinstance(columns, Mapping) else [(c, f":{c}") for c in columns]
    _check_columns(table, [c for c, _ in pairs])
    return pairs


def _check_columns(table: str, names: Sequence[str]) -> None:
    have = METADATA.tables[table].columns.keys()
    missing = [n for n in names if n not in have]
    if missing:
        raise TypeError(f"{table} has no column {', '.join(missing)}")


def _compile(
    cls: type[T], names: Sequence[str], convert: Mapping[str, Callable[[Any], Any]], empty: Sequence[str]
) -> Any:
    hints = typing.get_type_hints(cls)
    scope: dict[str, Any] = {"_cls": cls}
    parts = []
    for i, name in enumerate(names):
        value = f"r[{i}]"
        if name in convert:
            scope[f"_c{i}"] = convert[name]
            parts.append(f"_c{i}({value})")
        else:
            parts.append(_expression(cls, name, hints[name], value, empty=name in empty))
    source = f"def read(r):\n    return _cls({', '.join(parts)})\n"
    exec(source, scope)  # noqa: S102 - source built above from the class's own field names
    return scope["read"]


def _expression(cls: type, name: str, hint: Any, value: str, *, empty: bool) -> str:
    if hint in _READ:
        return (_READ_EMPTY if empty else _READ)[hint].format(v=value)
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        if inner in _READ_OPTIONAL:
            return _READ_OPTIONAL[inner].format(v=value)
    raise TypeError(f"{cls.__name__}.{name}: no reader for {hint!r}; give one in convert")
