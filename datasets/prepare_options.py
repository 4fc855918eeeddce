"""The options every `gnnsys prepare` input kind shares, checked."""

from __future__ import annotations

from dataclasses import dataclass

from gnnsys.errors import DatasetError
from gnnsys.host_memory import available_host_bytes
from gnnsys.numbers import FLOAT_MAX

from .features_file import DTYPES, row_stride

DEFAULT_MEM_LIMIT_GB = 8.0
NODE_FEATURES_FROM_EDGES = ("none", "mean", "sum")


@dataclass
class PrepareOptions:
    """Options shared by every `gnnsys prepare` input kind."""

    to_undirected: bool = False
    self_loops: str = "keep"
    dedup: bool = False
    reorder: str = "none"
    align: int = 128
    dtype: str = "float32"
    overwrite: bool = False
    nan_to_zero: bool = False
    normalize_features: str = "none"
    remap_labels: bool = False
    mem_limit: float | None = None
    node_features_from_edges: str = "none"
    progress: bool = True

    def check(self):
        """DatasetError naming the option whose value is not one it takes."""
        if self.self_loops not in ("keep", "drop"):
            raise DatasetError("--self-loops", f"must be keep or drop, got {self.self_loops!r}")
        if self.normalize_features not in ("none", "row"):
            raise DatasetError("--normalize-features", f"must be none or row, got {self.normalize_features!r}")
        if self.node_features_from_edges not in NODE_FEATURES_FROM_EDGES:
            raise DatasetError(
                "--node-features-from-edges",
                f"must be one of {', '.join(NODE_FEATURES_FROM_EDGES)}, got {self.node_features_from_edges!r}",
            )
        if self.reorder not in ("none", "degree"):
            raise DatasetError("--reorder", f"must be none or degree, got {self.reorder!r}")
        if self.dtype not in DTYPES:
            raise DatasetError("--dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        row_stride(1, self.dtype, self.align)
        if self.mem_limit is not None and not 0 < self.mem_limit <= FLOAT_MAX:
            raise DatasetError(
                "--mem-limit", f"must be a number of GB > 0 and at most {FLOAT_MAX:g}, got {self.mem_limit}"
            )

    def mem_limit_bytes(self) -> int:
        """The memory limit in bytes: mem_limit GB, else the default
        min(DEFAULT_MEM_LIMIT_GB, half of the memory available now)."""
        if self.mem_limit is not None:
            return int(self.mem_limit * 1e9)
        return int(min(DEFAULT_MEM_LIMIT_GB * 1e9, available_host_bytes() / 2))
