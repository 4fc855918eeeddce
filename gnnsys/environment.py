"""Every environment variable gnnsys reads, in one table with what each may
hold (a leaf: imports only gnnsys.errors).

`value(name)` is how the program reads one: its parsed value, None when it
is unset or empty, ConfigError naming the variable and what it may hold when
it is anything else. `check_environment()` reads them all; every command of
the CLI calls it first, so a bad value stops the command before any work
(not after the epochs that precede the first read). The torchrun variables
are read only in a process torchrun started (TORCHELASTIC_RUN_ID set).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gnnsys.errors import ConfigError

TORCHRUN = "TORCHELASTIC_RUN_ID"


@dataclass(frozen=True)
class Variable:
    """An environment variable: `allowed` says in words what it may hold,
    `parse(text)` gives its value or raises ValueError; `under` names the
    variable without which it is not read."""

    name: str
    allowed: str
    parse: Callable[[str], object]
    under: str | None = None


def _one_of(*choices: str, case: bool = True) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if (text if case else text.lower()) not in (choices if case else [c.lower() for c in choices]):
            raise ValueError(text)
        return text

    return parse


def _integer(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = int(text)
        if number < low or (high is not None and number > high):
            raise ValueError(text)
        return number

    return parse


def _any(text: str) -> str:
    return text


# torch's ATEN_CPU_CAPABILITY values (of every architecture), and oneDNN's ISA names (case-insensitive)
ATEN_CAPABILITIES = ("default", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "zvector", "vsx", "sve128", "sve256")
ONEDNN_ISAS = (
    "ALL",
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX512_CORE_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512",
    "AVX10_1_512_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
    "ASIMD",
    "SVE_128",
    "SVE_256",
    "SVE_512",
)
VARIABLES = (
    Variable("GNNSYS_CPU_BF16", "0 or 1 (whether bf16 matmuls count as fast on this CPU)", _one_of("0", "1")),
    Variable("GNNSYS_CACHE_DIR", "a directory for per-machine measurements", _any),
    Variable("TRITON_INTERPRET", "0 or 1", _one_of("0", "1")),
    Variable("ATEN_CPU_CAPABILITY", f"one of {', '.join(ATEN_CAPABILITIES)}", _one_of(*ATEN_CAPABILITIES)),
    *(
        Variable(name, f"a oneDNN ISA name: one of {', '.join(ONEDNN_ISAS)}", _one_of(*ONEDNN_ISAS, case=False))
        for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
    ),
    Variable(TORCHRUN, "torchrun's run id", _any),
    Variable("WORLD_SIZE", "an integer >= 1", _integer(1), TORCHRUN),
    Variable("RANK", "an integer >= 0", _integer(0), TORCHRUN),
    Variable("LOCAL_RANK", "an integer >= 0", _integer(0), TORCHRUN),
    Variable("MASTER_PORT", "an integer in 1..65535", _integer(1, 65535), TORCHRUN),
    Variable("MASTER_ADDR", "a host name or address", _any, TORCHRUN),
)
_BY_NAME = {v.name: v for v in VARIABLES}


def value(name: str):
    """The parsed value of environment variable `name` (one of VARIABLES);
    None when it is unset or empty; ConfigError naming it and what it may
    hold when its text is not that."""
    variable = _BY_NAME[name]
    text = os.environ.get(name, "")
    if text == "":
        return None
    try:
        return variable.parse(text)
    except ValueError:
        raise ConfigError(name, f"must be {variable.allowed}, got {text!r}") from None


def check_environment() -> None:
    """Read every variable of VARIABLES (those `under` another only where it
    is set): ConfigError naming the first one whose value is not allowed."""
    for variable in VARIABLES:
        if variable.under is None or os.environ.get(variable.under):
            value(variable.name)
