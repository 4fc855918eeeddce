"""Which options the caller gave: `GivenOptions`, the base of the training
options (gnnsys.training.options), records the options passed with a value
other than None, whatever the value, so that an option that does not apply
to a run is refused when given and recorded as not applying otherwise (its
`to_dict` value is then None)."""

from __future__ import annotations

import dataclasses
import typing

from gnnsys.errors import ConfigError


class GivenOptions:
    """The given-option bookkeeping of a frozen options dataclass that has a
    `_given` field (frozenset | None, default None, compare=False)."""

    def __new__(cls, *args, **keywords):
        self = super().__new__(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        object.__setattr__(self, "_passed", {**dict(zip(names, args)), **keywords})
        return self

    def _set(self, name: str, value):
        object.__setattr__(self, name, value)

    def _record_given(self):
        """`_given`: the options passed with a value other than None (None stands for the default of an
        option that cannot be None, so `gnnsys.train(lr_gamma=None)` gives nothing); after
        dataclasses.replace, the given ones of the options replaced plus those it changed from their defaults."""
        passed = self.__dict__.pop("_passed", {})
        hints = typing.get_type_hints(type(self))
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name != "_given"}
        for name in defaults:
            if name in passed and passed[name] is None and type(None) not in _runtime_types(hints[name]):
                self._set(name, defaults[name])
        if self._given is None:
            given = {n for n, v in passed.items() if v is not None and n in defaults}
        else:
            given = set(self._given) | {n for n in defaults if getattr(self, n) != defaults[n]}
        self._set("_given", frozenset(given))
        self._set("_inapplicable", set())  # filled by the checks (_refuse_given)

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


def _runtime_types(hint) -> tuple:
    """The classes isinstance accepts for a type hint (int | None -> (int, NoneType))."""
    return tuple(typing.get_origin(a) or a for a in (typing.get_args(hint) or (hint,)))
