"""The options schema: each option described once, as a pydantic field.

An option is a field of a component (`gnnsys.training.components`: model,
sampling, feature tiers, evaluation, optimisation, run, ...) declared with
`option(default, help, ...)`: its type, choices (a `Literal`) and range
(`ge`, `gt`, `le`, `lt`) are checked by pydantic when options are built,
and its help, group and flag are what `gnnsys train --help`, `--config`
and the options table of the docs are generated from. A trainer's options
class (`TrainOptions` and its subclasses) combines components; only the
rules that relate several fields are written by hand, each in the
component (or class) that owns the fields, in a `_check` that calls
`super()._check()`.

Integers are at most INT_MAX (seeds excepted, which have their own range),
floats finite and at most FLOAT_MAX in magnitude, booleans only booleans;
`None` stands for the default of an option that cannot be None. The
options the caller gave (with a value other than None) are recorded, so
that an option that does not apply to a run is refused when given and
written as None otherwise (`to_dict`).
"""

from __future__ import annotations

import os
import types
import typing
from typing import Any, ClassVar

import annotated_types
import pydantic
import torch
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic.fields import FieldInfo

from gnnsys.errors import ConfigError, did_you_mean
from gnnsys.numbers import FLOAT_MAX

INT_MAX = 2**31 - 1


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: tuple = (),
    shown: str | None = None,
    gb: bool = False,
    cli: bool = True,
    absent: Any = ...,
    **constraints,
) -> Any:
    """A field of the options schema: its `default` and `help` text, and
    for the command line its `flag` (default --NAME with dashes),
    `metavar`, `choices` (of a str field that also takes other values,
    checked by the options' own rule), `shown` (how help names a default that is not a value), `gb` (a size in
    GB), `cli=False` for a field the program sets; `absent`: what a
    checkpoint written before the option existed meant (default: the
    default); `constraints`: pydantic's (ge, gt, le, lt)."""
    extra = {"flag": flag, "metavar": metavar, "choices": choices, "shown": shown, "gb": gb}
    extra |= {"cli": cli, "absent": absent}
    return Field(default, description=help, json_schema_extra={"gnnsys": extra}, **constraints)  # type: ignore[arg-type,dict-item]


def cli_info(info: FieldInfo) -> dict:
    """The command-line description `option()` gave a field (flag, metavar, choices, shown, gb, cli, absent)."""
    extra = info.json_schema_extra
    return dict(extra["gnnsys"]) if isinstance(extra, dict) else {}  # type: ignore[arg-type]


def choices(info: FieldInfo) -> tuple:
    """The values a field's Literal type (or its `option(choices=...)`) admits, None left out; () for none."""
    found: list = list(cli_info(info).get("choices", ()))
    for arg in members(info.annotation):
        if typing.get_origin(arg) is typing.Literal:
            found += typing.get_args(arg)
    return tuple(found)


def nullable(info: FieldInfo) -> bool:
    """Whether None is a value of the field (else None stands for its default)."""
    return type(None) in members(info.annotation)


def members(annotation) -> tuple:
    """The types a union admits (`int | None` -> (int, NoneType)); a type that is not a union alone."""
    return (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )


class OptionsSchema(BaseModel):
    """Base of every options class: pydantic checks each field when built
    (a ConfigError naming the option), then `_complete` fills values that
    depend on others and `_check` runs the rules that relate fields."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", validate_default=False)
    _given: frozenset = PrivateAttr(frozenset())
    _inapplicable: set = PrivateAttr(default_factory=set)
    RESUMABLE: ClassVar[tuple] = ()  # options a resumed run may change; every other one must match the checkpoint
    APPLIES_TO: ClassVar[str | None] = None  # what a run with these options is, in refusals (default: the class)
    ABSENT: ClassVar[dict] = {}  # {an option other kinds of run have: why this one has it not}

    def __init__(self, **values):
        fields = type(self).model_fields
        for name in values:
            if name not in fields:
                raise ConfigError(name, type(self).not_an_option(name))
        given = frozenset(n for n, v in values.items() if v is not None)
        try:
            super().__init__(**{n: v for n, v in values.items() if v is not None or nullable(fields[n])})
        except pydantic.ValidationError as e:
            raise config_error(e, fields) from None
        self._given = given
        self._complete()
        self._check()

    @field_validator("*", mode="before")
    @classmethod
    def _plain_value(cls, value, info):
        """Tuples from lists, strings from paths and devices; integers within INT_MAX, floats finite."""
        field = cls.model_fields[info.field_name]
        if isinstance(value, list) and typing.get_origin(field.annotation) is tuple:
            value = tuple(value)
        if isinstance(value, (os.PathLike, torch.device)):
            return str(value)
        for v in value if isinstance(value, tuple) else (value,):
            if type(v) is int and v > INT_MAX and not _bounded(field):
                raise ValueError(f"must be at most 2**31 - 1, got {v}")
            if type(v) is float and not abs(v) <= FLOAT_MAX:
                raise ValueError(f"must be a finite number at most {FLOAT_MAX:g} in magnitude, got {v}")
        return value

    def _set(self, name: str, value):
        object.__setattr__(self, name, value)  # a value `_complete` derives: the model is frozen to its users

    def _complete(self):
        """Fill in the values that depend on other options (none here)."""

    def _check(self):
        """The rules that relate several options (none here); subclasses call super()._check() first."""

    @classmethod
    def not_an_option(cls, name: str) -> str:
        """Why `name` is refused: an option this kind of run has not (ABSENT says why), or a name that is no
        option (with the nearest that is)."""
        if name in cls.ABSENT:
            return f"does not apply to {cls.APPLIES_TO or cls.__name__}: {cls.ABSENT[name]}"
        return f"is not an option of {cls.__name__}{did_you_mean(name, cls.model_fields)}"

    def given(self, name: str) -> bool:
        """Whether the caller gave option `name` (whatever its value)."""
        return name in self._given

    def _refuse_given(self, names, why: str):
        """`names` do not apply to this run: ConfigError naming the first of them the caller gave (whatever
        its value), saying `why`; else they are recorded as not applying (`to_dict` gives them as None)."""
        self._inapplicable.update(names)
        given = [n for n in names if self.given(n)]
        if given:
            raise ConfigError(given[0], why)

    @property
    def inapplicable(self) -> frozenset:
        """The options that do not apply to this run (None in `to_dict`)."""
        return frozenset(self._inapplicable)

    def given_values(self) -> dict:
        """{name: value} of the options the caller gave."""
        return {n: getattr(self, n) for n in type(self).model_fields if n in self._given}

    def replace(self, **changes):
        """These options with `changes`, built and checked again: the options given here stay given."""
        return type(self)(**{**self.given_values(), **changes})

    def to_dict(self) -> dict:
        """Plain JSON-ready values (tuples as lists); None for an option that does not apply to the run,
        so `type(o)(**o.to_dict()) == o`."""
        return {n: None if n in self.inapplicable else _plain(getattr(self, n)) for n in type(self).model_fields}

    def resumable(self) -> tuple:
        """The options a resumed run may change: the RESUMABLE of every component of the class."""
        return tuple(dict.fromkeys(n for c in reversed(type(self).__mro__) for n in vars(c).get("RESUMABLE", ())))

    def resume_key(self) -> dict:
        """The options a checkpoint must share with the run that resumes it."""
        return {k: v for k, v in self.to_dict().items() if k not in self.resumable()}

    @classmethod
    def saved(cls, values: dict) -> dict:
        """The options of a checkpoint, `values`, as this class's fields: those it lacks filled in with what
        the run that wrote it used (an option's `absent`, by default its default); keys that are no option of
        this class (values a former version recorded) left out."""
        filled = {}
        for name, info in cls.model_fields.items():
            absent = cli_info(info).get("absent", ...)
            filled[name] = values.get(name, info.default if absent is ... else absent)
        return filled

    @classmethod
    def build(cls, options=None, keywords: dict | None = None):
        """`options` (an instance of cls; another options class's are taken as the cls of the options they
        were given, an option cls has not being a ConfigError naming it), or cls built from `keywords` (an
        unknown keyword is a ConfigError naming it); not both."""
        keywords = keywords or {}
        if options is not None:
            if keywords:
                raise TypeError(f"pass options or keywords, not both (got {', '.join(sorted(keywords))})")
            if not isinstance(options, OptionsSchema):
                raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
            if isinstance(options, cls):
                return options
            return cls(**options.given_values())  # another kind's options (a caller's for either kind of dataset)
        return cls(**keywords)

    def __eq__(self, other):
        return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n in type(self).model_fields)

    def __hash__(self):
        return hash((type(self), tuple(_hashable(getattr(self, n)) for n in type(self).model_fields)))


def config_error(error: pydantic.ValidationError, fields: dict) -> ConfigError:
    """The first problem of a pydantic ValidationError as a ConfigError naming the option, in words."""
    first = error.errors()[0]
    name, value, kind, ctx = str(first["loc"][0]), first["input"], first["type"], first.get("ctx") or {}
    info = fields.get(name)
    if kind == "literal_error" and info is not None:
        allowed = choices(info)
        extra = " or None" if nullable(info) else ""
        hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
        return ConfigError(name, f"must be one of {', '.join(map(str, allowed))}{extra}, got {value!r}{hint}")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and info is not None:
        return ConfigError(name, f"must be {value_range(info)}, got {value!r}")
    if kind == "value_error":
        return ConfigError(name, str(ctx.get("error", first["msg"])))
    if kind.endswith("_type") and info is not None:
        return ConfigError(name, f"must be {type_name(info)}, got {value!r}")
    return ConfigError(name, f"{first['msg'][0].lower()}{first['msg'][1:]}, got {value!r}")


def value_range(info: FieldInfo) -> str:
    """A field's range in words: ">= 1", "in [0, 1)", "in 0..18446744073709551615"."""
    low: tuple | None = None
    high: tuple | None = None
    for m in info.metadata:
        if isinstance(m, (annotated_types.Ge, annotated_types.Gt)):
            low = (m.ge, "[") if isinstance(m, annotated_types.Ge) else (m.gt, "(")
        elif isinstance(m, (annotated_types.Le, annotated_types.Lt)):
            high = (m.le, "]") if isinstance(m, annotated_types.Le) else (m.lt, ")")
    if low and high:
        if low[1] == "[" and high[1] == "]" and int in members(info.annotation):
            return f"in {low[0]}..{high[0]}"
        return f"in {low[1]}{low[0]:g}, {high[0]:g}{high[1]}"
    bound, sign = (low, {"[": ">=", "(": ">"}) if low else (high, {"]": "<=", ")": "<"})
    assert bound is not None  # a range error comes from a field with a bound
    return f"{sign[bound[1]]} {bound[0]:g}"


def type_name(info: FieldInfo) -> str:
    """A field's type in words ("int or None", "one of a, b")."""
    names = []
    for arg in members(info.annotation):
        if typing.get_origin(arg) is typing.Literal:
            names.append("one of " + ", ".join(map(str, typing.get_args(arg))))
        elif arg is type(None):
            names.append("None")
        else:
            names.append("a tuple of int" if typing.get_origin(arg) is tuple else getattr(arg, "__name__", str(arg)))
    return " or ".join(names)


def _bounded(info: FieldInfo) -> bool:
    """Whether the field states its own upper bound (the seed's range is wider than INT_MAX)."""
    return any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in info.metadata)


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def _hashable(value):
    return (
        tuple(sorted((k, _hashable(v)) for k, v in value.items())) if isinstance(value, dict) else _plain_tuple(value)
    )


def _plain_tuple(value):
    return tuple(value) if isinstance(value, list) else value
