"""The options of `gnnsys predict` (and `gnnsys.predict`), in the options
schema's terms (gnnsys.training.schema): `PredictOptions` for a homogeneous
dataset, streamed layer by layer; `HeteroPredictOptions` for a
heterogeneous one, whose layers are held in memory, so it has none of the
streaming options (giving one is refused as not an option of it)."""

from __future__ import annotations

from typing import ClassVar, Literal

from gnnsys._capabilities import normalize_device
from gnnsys.inference.layerwise import DEFAULT_BUDGET
from gnnsys.inference.prediction_io import OUTPUTS
from gnnsys.storage.memory_plan import GB
from gnnsys.training.components import StreamingInferenceSchema
from gnnsys.training.schema import OptionsSchema, option


class PredictionSchema(OptionsSchema):
    """What a prediction writes, and where and how it computes it."""

    GROUP: ClassVar[str] = "prediction"
    output: Literal[OUTPUTS] = option(  # type: ignore[valid-type]
        "scores",
        "scores: the last layer's logits (float32, before softmax); labels: their argmax (int64; multi-label "
        "datasets: each task's 0/1, int8); embeddings: the output of --layer (float32)",
    )
    layer: int | None = option(None, "1-based layer whose output --output embeddings writes", ge=1, shown="the last")
    batch_size: int = option(4096, "destinations whose dense maps run at a time", ge=1)
    device: str = option("cpu", "cpu, cuda or cuda:N, for the dense maps")
    progress: bool = option(True, "progress bars")

    def _check(self):
        super()._check()
        self._set("device", str(normalize_device(self.device)))


class HeteroPredictOptions(PredictionSchema):
    """The options of predicting on a heterogeneous dataset (exact in-memory inference)."""

    APPLIES_TO: ClassVar[str] = "a heterogeneous dataset"
    ABSENT: ClassVar[dict] = dict.fromkeys(
        ("host_mem_budget", "scratch_dir", "inference_dtype"),
        "it belongs to streaming inference; a heterogeneous graph's holds its layers in memory",
    )


class LayerBudgetSchema(OptionsSchema):
    """The host memory streaming layer-wise inference holds a layer in."""

    GROUP: ClassVar[str] = "evaluation"  # with the streaming inference's other options
    host_mem_budget: float | None = option(
        None, "host memory one layer may hold", gt=0, gb=True, shown=f"{DEFAULT_BUDGET / GB:g}"
    )


class PredictOptions(PredictionSchema, StreamingInferenceSchema, LayerBudgetSchema):
    """The options of predicting on a homogeneous dataset by streaming layer-wise inference."""
