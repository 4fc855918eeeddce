"""`FullGraphOptions`: the options of full-graph training (the single-process
reference and GNNPipe), TrainOptions' with what differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gnnsys.errors import ConfigError
from gnnsys.models.names import CONVS, is_user_model
from gnnsys.parallel.partition import METHODS
from gnnsys.training.options import DEEP_FROM, TrainOptions


@dataclass(frozen=True)
class FullGraphOptions(TrainOptions):
    """Options of full-graph training (`gnnsys.train_fullgraph`), GNNPipe included.

    workers: pipeline stages (one process each); chunks: node chunks streamed
    through them (workers = chunks = 1: the single-process reference);
    partition "auto"/"metis"/"rcm"/"range"; balance "estimate"d or "measure"d
    unit cost; history_momentum, fresh_grad_scale, refresh_every and warmup:
    the historical embeddings (see gnnsys.trainers.gnnpipe); timeout_s: how long a
    silent worker may stall. From DEEP_FROM layers, norm "auto" is "layer"
    and residual/input_proj default on (None: that default).
    """

    model: str = "gcn"
    hidden: int = 64
    layers: int = 2
    epochs: int = 100
    lr: float = 0.01
    norm: str | None = "auto"
    residual: bool | None = None  # type: ignore[assignment]  # None until __post_init__ picks the depth's default
    input_proj: bool | None = None
    workers: int = 1
    chunks: int = 1
    partition: str = "auto"
    balance: str = "estimate"
    history_momentum: float = 0.0
    fresh_grad_scale: float = 1.0
    refresh_every: int = 1
    warmup: bool = True
    timeout_s: float = 120.0

    RESUMABLE: ClassVar[tuple] = TrainOptions.RESUMABLE + ("timeout_s",)
    POSITIVE: ClassVar[tuple] = TrainOptions.POSITIVE + ("layers", "workers", "chunks")

    def __post_init__(self):
        deep = isinstance(self.layers, int) and self.layers >= DEEP_FROM
        if self.input_proj is None:
            self._set("input_proj", deep)
        if self.residual is None:
            self._set("residual", deep)
        if self.norm == "auto":
            self._set("norm", "layer" if deep else None)
        super().__post_init__()

    @property
    def pipelined(self) -> bool:
        """True when the run is GNNPipe (more than one worker or chunk)."""
        return self.workers > 1 or self.chunks > 1

    def _check(self):
        super()._check()
        if is_user_model(self.model):
            raise ConfigError("model", f"full-graph training builds one of {', '.join(CONVS)}; got {self.model}")
        if self.pipelined:
            self._refuse_given(
                ("runs", "patience", "lr_schedule"),
                "is not supported by GNNPipe (workers or chunks > 1); train with workers=1 and chunks=1",
            )
        units = self.layers + int(self.input_proj)
        if self.workers > units:
            raise ConfigError("workers", f"{self.workers} workers need at least as many units, the model has {units}")
        if self.norm == "batch" and self.chunks > 1:
            raise ConfigError("norm", "batch norm would use per-chunk statistics in the pipeline; use 'layer'")
        if self.partition not in METHODS:
            raise ConfigError("partition", f"must be one of {METHODS}, got {self.partition!r}")
        if self.balance not in ("estimate", "measure"):
            raise ConfigError("balance", f"must be 'estimate' or 'measure', got {self.balance!r}")
        if self.refresh_every < 0:
            raise ConfigError("refresh_every", f"must be >= 0 (0: never), got {self.refresh_every}")
        if not 0 <= self.history_momentum < 1:
            raise ConfigError("history_momentum", f"must be in [0, 1), got {self.history_momentum}")

    def for_dataset(self, dataset):
        if self.chunks > dataset.num_nodes:
            raise ConfigError("chunks", f"{self.chunks} chunks for {dataset.num_nodes} nodes")
        return super().for_dataset(dataset)
