"""How the Triton row gather (storage/triton_gather.py) is launched, decided
without a GPU and without Triton.

- `plan_gather`: vector widths of loads and stores and whether rows start
  inside 128-byte lines (then each row's window is rotated back to its line);
- `LaunchConfig`: rows a tile, warps a program and threads a multiprocessor
  (the grid's thread budget; programs loop over the tiles), with defaults
  from the row size, or measured per GPU by benchmarks/sweep_gather_gpu.py
  and kept as a per-machine cache file (storage/machine_cache.py):
  `gather-<gpu name>.json` under $GNNSYS_CACHE_DIR (default ~/.cache/gnnsys),
  read when a gather first runs on that GPU;
- `tile_shape`: the tile a config gives for a plan: the tile's width covers a
  row's rotated span in one step (up to MAX_STEP_BYTES a step), and its rows
  are cut to what keeps each thread's share of the tile in registers.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from gnnsys.errors import DatasetError

from .machine_cache import cache_dir, read_cache

LINE_BYTES = 128  # PCIe read request / GPU cache line
MAX_STEP_BYTES = 16384  # bytes of a row one step covers; wider rows take several steps
MAX_THREAD_BYTES = 256  # bytes of a tile one thread holds (16 vectors of 16 bytes)
DEFAULT_TILE_BYTES = 16384  # the default tile: 128 bytes a thread with 4 warps
DEFAULT_WARPS = 4
DEFAULT_THREADS_PER_SM = 2048  # as many as fit: the grid is cut to the programs a multiprocessor holds
WARP = 32
TUNING_KEYS = ("row_bytes", "rows", "warps", "threads_per_sm", "sort")


@dataclass(frozen=True)
class GatherPlan:
    """How rows are copied, in elements of `elem` bytes (1, 2 or 4): loads of
    `load_vec` elements, stores of `store_vec`; rows are `row_v` store vectors
    long and `load_v` load vectors are read of each (the row rounded up to a
    whole load vector); the table's stride is `src_stride_v` load vectors and
    its start `base_off_v` load vectors past a 128-byte line; `rotate`: rows
    may start inside a line."""

    elem: int
    load_vec: int
    store_vec: int
    rotate: bool
    row_v: int
    load_v: int
    src_stride_v: int
    base_off_v: int

    @property
    def line_v(self) -> int:
        """Load vectors per 128-byte line."""
        return LINE_BYTES // (self.elem * self.load_vec)

    @property
    def load_bytes(self) -> int:
        """Bytes loaded of each row (whole load vectors)."""
        return self.load_v * self.load_vec * self.elem

    @property
    def span(self) -> int:
        """Elements of a row's column window: the loaded row, and the line's
        head before it when rows are rotated back to their line."""
        return (self.load_v + (self.line_v - 1 if self.rotate else 0)) * self.load_vec


def plan_gather(table_ptr: int, src_stride: int, out_ptr: int, row_bytes: int) -> GatherPlan:
    """Load vectors: the widest power of two (at most 16 bytes) dividing the
    table's stride and pointer; store vectors: the widest dividing the row bytes
    and the output pointer; and whether rows start off 128-byte lines."""
    load_bytes = math.gcd(16, src_stride, table_ptr)
    store_bytes = math.gcd(16, row_bytes, out_ptr)
    elem = min(4, load_bytes, store_bytes)
    load_vec = load_bytes // elem
    row_w = row_bytes // elem
    return GatherPlan(
        elem=elem,
        load_vec=load_vec,
        store_vec=store_bytes // elem,
        rotate=src_stride % LINE_BYTES != 0 or table_ptr % LINE_BYTES != 0,
        row_v=row_bytes // store_bytes,
        load_v=-(-row_w // load_vec),
        src_stride_v=src_stride // load_bytes,
        base_off_v=(table_ptr % LINE_BYTES) // load_bytes,
    )


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


def prev_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n <= 1)."""
    return 1 << max(0, n.bit_length() - 1)


@dataclass(frozen=True)
class LaunchConfig:
    """`rows` a tile and `warps` a program (powers of two); the grid holds
    `threads_per_sm` threads per multiprocessor (at least one program), each
    program looping over tiles; `sort`: the ids are sorted on the device first
    (rows read in address order) and the rows stored through the permutation."""

    rows: int
    warps: int = DEFAULT_WARPS
    threads_per_sm: int = DEFAULT_THREADS_PER_SM
    sort: bool = False

    def __post_init__(self):
        if not (_pow2(self.rows) and self.rows <= 1024):
            raise ValueError(f"rows a tile must be a power of two in 1..1024, got {self.rows}")
        if not (_pow2(self.warps) and self.warps <= 16):
            raise ValueError(f"warps must be a power of two in 1..16, got {self.warps}")
        if not 1 <= self.threads_per_sm <= 1 << 16:
            raise ValueError(f"threads a multiprocessor must be in 1..65536, got {self.threads_per_sm}")

    def programs(self, multiprocessors: int) -> int:
        """Programs of the grid on a GPU with `multiprocessors` SMs."""
        return max(1, multiprocessors * self.threads_per_sm // (self.warps * WARP))


def max_tile_rows(plan: GatherPlan, warps: int) -> int:
    """The most rows a tile of `warps` warps can hold for `plan` (MAX_THREAD_BYTES a thread)."""
    _, block_w = step_width(plan)
    return prev_pow2((warps * WARP * MAX_THREAD_BYTES) // (block_w * plan.elem))


def step_width(plan: GatherPlan) -> tuple[int, int]:
    """(steps a row, BLOCK_W): the row's span in one step when it fits MAX_STEP_BYTES."""
    block_w = min(next_pow2(plan.span), MAX_STEP_BYTES // plan.elem)
    return -(-plan.span // block_w), block_w


def tile_shape(plan: GatherPlan, config: LaunchConfig) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_W) of the kernel: `config.rows`, cut to max_tile_rows, by the step width."""
    return min(config.rows, max_tile_rows(plan, config.warps)), step_width(plan)[1]


def default_config(load_bytes: int) -> LaunchConfig:
    """The config used where no measured one applies: tiles of about
    DEFAULT_TILE_BYTES, 4 warps, as many programs as the multiprocessors hold."""
    per_row = next_pow2(max(load_bytes, 1))
    return LaunchConfig(rows=max(1, min(1024, DEFAULT_TILE_BYTES // per_row)))


# The fastest config per row size on an H100, printed by benchmarks/sweep_gather_gpu.py (none measured yet);
# a GPU's own tuning file takes precedence.
MEASURED: dict[int, LaunchConfig] = {}


def config_for(load_bytes: int, tuned: dict[int, LaunchConfig] | None) -> LaunchConfig:
    """The measured config (`tuned`, this GPU's, else MEASURED) of the smallest
    measured row size >= load_bytes (the largest for longer rows); default_config
    without measurements."""
    tuned = tuned or MEASURED
    if not tuned:
        return default_config(load_bytes)
    fits = [size for size in tuned if size >= load_bytes]
    return tuned[min(fits) if fits else max(tuned)]


def tuning_path(gpu_name: str, root: Path | None = None) -> Path:
    """The tuning file of the GPU named `gpu_name` under `root` (default: the machine cache directory)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"
    return Path(root if root is not None else cache_dir()) / f"gather-{slug}.json"


def tuning_document(gpu_name: str, configs: dict[int, LaunchConfig], **facts) -> dict:
    """The JSON value of a tuning file (what check_tuning accepts)."""
    rows = [{"row_bytes": size, **asdict(c)} for size, c in sorted(configs.items())]
    return {"gpu": gpu_name, **facts, "configs": rows}


def check_tuning(value, path) -> None:
    """DatasetError naming `path` unless `value` is a tuning document."""
    parse_tuning(value, path)


def parse_tuning(value, path) -> dict[int, LaunchConfig]:
    """{row bytes: LaunchConfig} of a tuning document; DatasetError naming `path` and the problem."""
    rows = value.get("configs") if isinstance(value, dict) else None
    if not isinstance(rows, list) or not rows:
        raise DatasetError(path, "a gather tuning file must hold a non-empty list 'configs'")
    configs = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or sorted(row) != sorted(TUNING_KEYS):
            raise DatasetError(path, f"configs[{i}] must have exactly the keys {', '.join(TUNING_KEYS)}")
        if not all(type(row[k]) is int for k in TUNING_KEYS[:-1]) or type(row["sort"]) is not bool:
            raise DatasetError(path, f"configs[{i}]: sort must be true or false, the others integers")
        if row["row_bytes"] < 1:
            raise DatasetError(path, f"configs[{i}]: row_bytes must be >= 1")
        try:
            configs[row["row_bytes"]] = LaunchConfig(row["rows"], row["warps"], row["threads_per_sm"], row["sort"])
        except ValueError as e:
            raise DatasetError(path, f"configs[{i}]: {e}") from None
    return configs


def read_tuning(gpu_name: str, root: Path | None = None) -> dict[int, LaunchConfig] | None:
    """The measured configs of `gpu_name` (None: no usable tuning file; a bad one warns once)."""
    path = tuning_path(gpu_name, root)
    value = read_cache(path, check_tuning)
    return None if value is None else parse_tuning(value, path)


@dataclass(frozen=True)
class SMLimits:
    """What one multiprocessor holds at once (sm_70 .. sm_90 values by default)."""

    registers: int = 65536
    threads: int = 2048
    programs: int = 32
    shared_bytes: int = 228 << 10


def resident_programs(registers: int, warps: int, shared_bytes: int, limits: SMLimits = SMLimits()) -> int:
    """Programs of `warps` warps, `registers` a thread and `shared_bytes` each
    that one multiprocessor runs at once (registers are allocated per warp in
    units of 256). A grid larger than this times the multiprocessors would
    leave programs waiting for a slot, and their tiles (fixed at launch) late."""
    per_warp = -(-registers * WARP // 256) * 256
    by_registers = limits.registers // max(per_warp, 1) // warps
    by_shared = limits.shared_bytes // shared_bytes if shared_bytes else limits.programs
    return max(1, min(by_registers, limits.threads // (warps * WARP), by_shared, limits.programs))
