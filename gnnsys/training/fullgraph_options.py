"""`FullGraphOptions`: the options of full-graph training (the single-process
reference and GNNPipe): TrainOptions' and the pipeline's, with defaults of
their own (a 2-layer GCN of width 64 for 100 epochs at lr 0.01)."""

from __future__ import annotations

from typing import ClassVar, Literal

from gnnsys.errors import ConfigError
from gnnsys.models.names import CONVS, is_user_model
from gnnsys.parallel.partition import METHODS
from gnnsys.training.components import HiddenLayersSchema
from gnnsys.training.options import DEEP_FROM, TrainOptions
from gnnsys.training.schema import OptionsSchema, option

DEFAULT_OF_DEPTH = f"on from {DEEP_FROM} layers"


class PipelineSchema(OptionsSchema):
    """GNNPipe: pipeline stages, the node chunks streamed through them and their historical embeddings."""

    GROUP: ClassVar[str] = "full-graph"
    RESUMABLE: ClassVar[tuple] = ("timeout_s",)
    workers: int = option(1, "pipeline stages, one process each (GNNPipe when --workers/--chunks > 1)", ge=1)
    chunks: int = option(1, "node chunks streamed through the pipeline", ge=1)
    partition: Literal[METHODS] = option(  # type: ignore[valid-type]
        "auto", "how nodes are cut into chunks (auto: METIS when installed)"
    )
    balance: Literal["estimate", "measure"] = option("estimate", "stages balanced by estimated or measured unit cost")
    history_momentum: float = option(0.0, "momentum of the historical embeddings' updates", ge=0, lt=1)
    fresh_grad_scale: float = option(1.0, "scale of the gradients fresh embeddings pass back", ge=0)
    refresh_every: int = option(
        1, "recompute the pipeline's historical embeddings exactly every N epochs (0: never)", ge=0
    )
    warmup: bool = option(True, "an exact first epoch before the pipeline uses historical embeddings")
    timeout_s: float = option(120.0, "seconds a silent worker may stall", gt=0)
    input_proj: bool | None = option(None, "a linear projection of the input features first", shown=DEFAULT_OF_DEPTH)


class FullGraphOptions(TrainOptions, HiddenLayersSchema, PipelineSchema):
    """Options of full-graph training (`gnnsys.train_fullgraph`), GNNPipe
    included (workers = chunks = 1: the single-process reference). From
    DEEP_FROM layers, norm "auto" is "layer" and residual/input_proj
    default on (None: that default)."""

    model: str = option("gcn", "conv layer", choices=CONVS)
    hidden: int = option(64, "hidden size", ge=1)
    layers: int = option(2, "number of layers", ge=1)  # type: ignore[assignment]
    epochs: int = option(100, "epochs", ge=1)
    lr: float = option(0.01, "Adam learning rate", gt=0)
    norm: Literal["batch", "layer", "auto"] | None = option(  # type: ignore[assignment]
        "auto", "normalisation after hidden layers", shown=f"layer from {DEEP_FROM} layers, else none"
    )
    residual: bool | None = option(  # type: ignore[assignment]
        None, "residual connections in hidden layers", shown=DEFAULT_OF_DEPTH
    )

    def _complete(self):
        super()._complete()
        deep = self.layers >= DEEP_FROM
        if self.input_proj is None:
            self._set("input_proj", deep)
        if self.residual is None:
            self._set("residual", deep)
        if self.norm == "auto":
            self._set("norm", "layer" if deep else None)

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

    def for_dataset(self, dataset):
        if self.chunks > dataset.num_nodes:
            raise ConfigError("chunks", f"{self.chunks} chunks for {dataset.num_nodes} nodes")
        return super().for_dataset(dataset)
