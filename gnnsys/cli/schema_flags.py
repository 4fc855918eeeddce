"""Command-line flags generated from the options schema (gnnsys.training.schema).

Every field of the given options classes that the program does not set
itself becomes one flag in the group of its component: `--NAME` with
dashes; an int, a float (a size in GB for a `gb` field), one of its
choices, a comma-separated list of integers for a tuple, `KEY=N,N,...`
repeated for a mapping; a bool is `--NAME` when off by default, `--no-NAME`
when on, and both where the classes' defaults differ. Its help is the
field's, with each class's default. Flags left out are left out of the
options too, so the schema's defaults are the only ones.

`--config FILE` reads the same options from a YAML file (keys are the
options' names, as `--print-config` writes them); flags given on the
command line win over the file's values.
"""

from __future__ import annotations

import argparse
import re
import typing

import yaml

from gnnsys.errors import ConfigError, DatasetError, did_you_mean
from gnnsys.numbers import gigabytes, gigabytes_or_zero, number
from gnnsys.training.components import GROUPS
from gnnsys.training.schema import choices, cli_info, members


def flag(name: str, info=None) -> str:
    """The command-line flag of option `name` (`info`: its schema field, whose own flag wins)."""
    own = cli_info(info).get("flag") if info is not None else None
    return own or f"--{name.replace('_', '-')}"


def schema_fields(classes: dict) -> dict:
    """{group: {name: [(label, class, field info), ...]}} of every command-line option of `classes`
    ({label: options class}), groups in GROUPS order, fields in their components' order."""
    found: dict = {group: {} for group in GROUPS}
    group_of: dict = {}  # a field in several classes is one flag, in the group of its first owner
    for label, cls in classes.items():
        for component in cls.__mro__:
            group = vars(component).get("GROUP")
            for name in vars(component).get("__annotations__", {}) if group else ():
                info = cls.model_fields.get(name)
                if info is not None and cli_info(info).get("cli", True) and component is _owner(cls, name):
                    group_of.setdefault(name, group)
                    found[group_of[name]].setdefault(name, []).append((label, cls, info))
    return {group: fields for group, fields in found.items() if fields}


def _owner(cls, name: str):
    """The component (a class with a GROUP) that declares field `name` of `cls` first in its MRO."""
    return next(c for c in cls.__mro__ if "GROUP" in vars(c) and name in vars(c).get("__annotations__", {}))


def add_schema_arguments(parser, classes: dict, titles: dict | None = None):
    """Add to `parser` one flag per option of `classes` ({label: options
    class}; the first is the default the help shows first), in one
    argument group per component group (`titles`: a group's title where it
    is not the group's name); returns {group: its argument group}."""
    groups = {}
    for group, fields in schema_fields(classes).items():
        groups[group] = g = parser.add_argument_group((titles or {}).get(group, group))
        for name, owners in fields.items():
            _add_flag(g, name, owners)
    return groups


def _add_flag(g, name: str, owners: list):
    label, cls, info = owners[0]
    described = [f"{info.description}"] + [
        f"{other}: {i.description}" for other, _, i in owners[1:] if i.description != info.description
    ]
    defaults = {lbl: i.default for lbl, _, i in owners}
    kind = next(m for m in members(info.annotation) if m is not type(None))
    spec: dict = {"dest": name, "help": "; ".join(described)}
    shown = {lbl: _shown(i, i.default) for lbl, _, i in owners}
    if kind is bool:
        values = set(defaults.values())
        if values == {False}:
            spec["action"] = "store_true"
        elif values == {True}:
            spec["help"] = f"turn off: {spec['help']}"
            g.add_argument(f"--no-{name.replace('_', '-')}", action="store_false", **spec)
            return
        else:
            spec["action"] = argparse.BooleanOptionalAction
            spec["help"] += _default_help(shown)
    else:
        spec["metavar"] = cli_info(info).get("metavar") or ("GB" if cli_info(info).get("gb") else None)
        allowed = [c for _, _, i in owners for c in choices(i)]
        if allowed:
            spec["choices"] = list(dict.fromkeys(allowed))
        elif typing.get_origin(kind) is tuple:
            spec["type"] = integer_list
        elif typing.get_origin(kind) is dict:
            spec.update(type=keyed_integer_list, action="append")
        elif kind is float:
            zero = any(getattr(m, "ge", None) == 0 for m in info.metadata)  # a size that may be none
            spec["type"] = (gigabytes_or_zero if zero else gigabytes) if cli_info(info).get("gb") else number
        elif kind is int:
            spec["type"] = int
        spec["help"] += _default_help(shown)
    g.add_argument(flag(name, info), **{k: v for k, v in spec.items() if v is not None})


def _shown(info, value) -> str | None:
    """How help names a default `value`: the field's `shown` text where it is None or described, else the value
    (a list comma-joined; a bool on or off); None for nothing to show."""
    if cli_info(info).get("shown") and (value is None or isinstance(value, str) and value == "auto"):
        return cli_info(info)["shown"]
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return None
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _default_help(shown: dict) -> str:
    """ " (default: X)" or " (default: X; LABEL: Y)" for the labels whose default differs from the first's."""
    values = list(shown.items())
    first = values[0][1]
    others = [f"{label}: {text or 'none'}" for label, text in values[1:] if text != first]
    if first is None and not others:
        return ""
    return f" (default: {'; '.join([first or 'none', *others])})"


def integer_list(text: str) -> list[int]:
    """argparse type for "15,10,5" (-1 = every neighbour)."""
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 15,10,5, got {text!r}") from None


def keyed_integer_list(text: str) -> tuple[str, list[int]]:
    """argparse type for "KEY=4,3" (a relation's own fanouts: src__rel__dst=4,3)."""
    key, sep, counts = text.partition("=")
    try:
        values = [int(v) for v in counts.split(",")]
    except ValueError:
        values = []
    if not sep or not key or not values:
        raise argparse.ArgumentTypeError(f"expected NAME=N,N,... like paper__cites__paper=5,5, got {text!r}")
    return key, values


def given_options(args, exclude) -> dict:
    """The options given on the command line (argparse's namespace `args`, built with
    argument_default=SUPPRESS), less the `exclude`d names; a repeated KEY=N,N flag as one mapping."""
    given = {k: v for k, v in vars(args).items() if k not in exclude}
    return {k: dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) else v for k, v in given.items()}


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader reading `5e-4` as the number YAML 1.2 (and every user) means, not a string."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+.0123456789")
)


def read_config(path) -> dict:
    """The options of a YAML file `path` (a mapping of option names to values); DatasetError naming the file
    when it cannot be read or is not such a mapping."""
    try:
        with open(path) as f:
            values = yaml.load(f, Loader=_ConfigLoader)  # a SafeLoader: plain data only
    except OSError as e:
        raise DatasetError(path, f"cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise DatasetError(path, f"is not valid YAML{line}: {getattr(e, 'problem', None) or e}") from None
    if values is None:
        return {}
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise DatasetError(path, f"must be a mapping of option names to values, got {type(values).__name__}")
    return values


def check_config_keys(path, values: dict, names) -> None:
    """DatasetError naming the file and the first key of `values` that is not one of `names`, with the nearest."""
    for key in values:
        if key not in names:
            raise DatasetError(path, f"{key!r} is not an option{did_you_mean(key, names)}")


def build_options(cls, given: dict, applies_to: str, config: dict | None = None, path=None):
    """`cls` built from a config file's values (`config`, read from `path`) and the flags `given` (which
    win); ConfigError naming the flag (or the file's key) of an option `cls` has not ("does not apply to
    `applies_to`") or whose value it refuses."""
    config = config or {}
    for name in [*given, *config]:
        if name not in cls.model_fields:
            why = cls.ABSENT.get(name)
            refused = f"does not apply to {applies_to}" + (f": {why}" if why else "")
            raise ConfigError(flag(name) if name in given else f"{path}: {name}", refused)
    try:
        return cls(**{**config, **given})
    except ConfigError as e:
        raise as_flag_error(e, cls.model_fields, {k: str(path) for k in config if k not in given}) from None


def as_flag_error(error: ConfigError, fields: dict, given_in: dict) -> ConfigError:
    """`error` naming the flag (or the config file's key) the user wrote rather than the option's field name."""
    name = error.option
    if name not in fields:
        return error
    where = given_in.get(name)
    return ConfigError(f"{where}: {name}" if where else flag(name, fields[name]), error.problem)


def yaml_config(values: dict) -> str:
    """`values` as the YAML `--config` reads (options in the given order)."""
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
