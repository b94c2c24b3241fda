"""A table is declared once, as its row class (docs/data.md): ``@table("turns", key=…)``
over a frozen dataclass makes the SQL table from the class's fields, in their order,
and the same fields are what ``rows.Row`` selects, reads and inserts. A column's type
comes from the field's annotation (``str``, ``int``, ``float``, ``bool``; ``X | None``
is nullable); what the annotation cannot say (a server default, a unique or foreign
key, a value stored as text but read as a tuple) rides along in ``Annotated[…, Col(…)]``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Boolean, Column, Float, ForeignKey, Integer, MetaData, String, Table
from sqlalchemy.schema import SchemaItem

T = TypeVar("T")

# Every table ``migrations`` creates.
METADATA = MetaData()

_SQL_TYPES: dict[Any, Any] = {str: String, int: Integer, float: Float, bool: Boolean}
_TABLES: dict[type, Table] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Col:
    """What a column is beyond its field's annotation. ``stored``: the column's Python type
    when the field holds it converted (a comma list read as a tuple); ``autoincrement``:
    False for an integer key that the writer numbers itself."""

    server_default: str | None = None
    unique: bool = False
    foreign_key: str | None = None
    stored: Any = None
    autoincrement: bool | None = None


def table(
    name: str, *, key: Sequence[str], constraints: Sequence[SchemaItem] = ()
) -> Callable[[type[T]], type[T]]:
    """Declare ``name`` from the decorated dataclass: one column per field, ``key`` its
    primary key, ``constraints`` its indexes and unique constraints."""

    def declare(cls: type[T]) -> type[T]:
        hints = typing.get_type_hints(cls, include_extras=True)
        columns = [
            _column(cls, f.name, hints[f.name], primary=f.name in key)
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        ]
        missing = set(key) - {c.name for c in columns}
        if missing:
            raise TypeError(f"{cls.__name__}: key {sorted(missing)} is no field")
        _TABLES[cls] = Table(name, METADATA, *columns, *constraints)
        return cls

    return declare


def table_of(cls: type) -> Table | None:
    """The table ``cls`` (or the row class it extends) declares."""
    for base in cls.__mro__:
        if base in _TABLES:
            return _TABLES[base]
    return None


def _column(cls: type, name: str, hint: Any, *, primary: bool) -> Column[Any]:
    col = Col()
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        col = next((e for e in extras if isinstance(e, Col)), col)
    python, nullable = _unwrap(col.stored if col.stored is not None else hint)
    if python not in _SQL_TYPES:
        raise TypeError(f"{cls.__name__}.{name}: no column type for {hint!r}; give Col(stored=…)")
    args: list[Any] = [ForeignKey(col.foreign_key)] if col.foreign_key else []
    extra: dict[str, Any] = {}
    if col.server_default is not None:
        extra["server_default"] = col.server_default
    if col.autoincrement is not None:
        extra["autoincrement"] = col.autoincrement
    return Column(
        name,
        _SQL_TYPES[python](),
        *args,
        primary_key=primary,
        nullable=nullable and not primary,
        unique=col.unique,
        **extra,
    )


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of ``X`` or ``X | None``."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and len(args) == 2 and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False
