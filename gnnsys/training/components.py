"""The components of the training options, each a schema of its own fields
(gnnsys.training.schema): what each option is, its default, choices and
range, and the rules among a component's own fields. The trainers' options
classes (gnnsys.training.options, fullgraph_options, hetero_options)
combine the components they take; GROUP is the component's group in
`gnnsys train --help` and in the options table of the docs (GROUPS: their order).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from gnnsys._capabilities import normalize_device
from gnnsys.errors import ConfigError
from gnnsys.inference.rows_io import OUTPUT_DTYPES
from gnnsys.models.names import CONVS, is_user_model
from gnnsys.runtime.precision import PRECISIONS, resolve_precision
from gnnsys.samplers.factory import SAMPLERS, SAMPLINGS
from gnnsys.storage.cache import RUN_POLICIES, run_policy
from gnnsys.storage.placement import PLACEMENTS
from gnnsys.training.schema import OptionsSchema, option
from gnnsys.training.tasks import METRICS as TASK_METRICS

OUT_OF_CORE = ("ssd", "packed")  # where rows are read from the disk as batches need them
FEATURES = PLACEMENTS + OUT_OF_CORE
EVAL_MODES = ("auto", "sampled", "layerwise")
METRICS = ("auto", *TASK_METRICS)
MAX_RUNS = 100  # runs of one call (OGB's leaderboard asks for 10)
SEED_MAX = 2**64 - 1
LR_SCHEDULES = {  # schedule -> the options it reads
    "none": (),
    "step": ("lr_step_size", "lr_gamma"),
    "cosine": ("lr_min",),
    "plateau": ("lr_gamma", "lr_patience"),
}
MODEL_SHAPE = ("hidden", "dropout", "input_dropout", "norm", "residual", "heads")  # what a user module decides
GROUPS = (
    "prediction",
    "model",
    "sampling",
    "feature tiers",
    "evaluation",
    "optimisation",
    "run",
    "full-graph",
    "heterogeneous",
)


class ModelSchema(OptionsSchema):
    """The model every trainer builds: its conv, width, depth and dropout."""

    GROUP: ClassVar[str] = "model"
    model: str = option("sage", "conv layer", choices=CONVS)
    hidden: int = option(256, "hidden size", ge=1)
    layers: int | None = option(None, "number of layers", ge=1, shown="one per fanout")
    dropout: float = option(0.5, "dropout after hidden layers", ge=0, lt=1)
    input_dropout: float = option(0.0, "dropout on input features", ge=0, lt=1)

    def _check(self):
        super()._check()
        if self.model not in CONVS and not is_user_model(self.model):
            raise ConfigError("model", f"must be one of {', '.join(CONVS)} or a torch.nn.Module, got {self.model!r}")


class HiddenLayersSchema(OptionsSchema):
    """How the hidden layers of a homogeneous graph's model are built."""

    GROUP: ClassVar[str] = "model"
    norm: Literal["batch", "layer"] | None = option(None, "normalisation after hidden layers", shown="none")
    residual: bool = option(False, "residual connections in hidden layers")
    heads: int = option(4, "GAT attention heads", ge=1)

    def _check(self):
        super()._check()
        if self.model == "gat" and self.hidden % self.heads:
            raise ConfigError(
                "heads",
                f"a GAT's hidden layers split hidden ({self.hidden}) among the heads: "
                f"heads must divide it, got {self.heads}",
            )
        if is_user_model(self.model):
            self._refuse_given(MODEL_SHAPE, f"shapes the built-in models; the user model {self.model} has its own")


class OptimisationSchema(OptionsSchema):
    """Adam, the epochs and runs, early stopping and the learning-rate schedule."""

    GROUP: ClassVar[str] = "optimisation"
    RESUMABLE: ClassVar[tuple] = ("epochs", "runs", "allow_nonfinite_loss")
    epochs: int = option(10, "epochs", ge=1)
    lr: float = option(0.005, "Adam learning rate", gt=0)
    weight_decay: float = option(5e-4, "Adam weight decay", ge=0)
    seed: int = option(0, "random seed (run i of --runs: seed + i)", ge=0, le=SEED_MAX)
    runs: int = option(
        1,
        f"train N runs (seeds seed, seed+1, ...; at most {MAX_RUNS}) and report each run's and the mean and std of "
        "the metrics at the epoch of best validation, as OGB's leaderboard does",
        ge=1,
        le=MAX_RUNS,
    )
    patience: int | None = option(
        None, "stop a run when its validation metric has not improved for N epochs", ge=1, metavar="N", shown="never"
    )
    lr_schedule: Literal["none", "step", "cosine", "plateau"] = option(
        "none",
        "step: lr times --lr-gamma every --lr-step-size epochs; cosine: down to --lr-min over --epochs; "
        "plateau: lr times --lr-gamma when validation has not improved for --lr-patience evaluations",
    )
    lr_step_size: int = option(10, "epochs between the decays of --lr-schedule step", ge=1, metavar="N")
    lr_gamma: float = option(0.1, "the factor of each decay (--lr-schedule step or plateau)", gt=0, lt=1)
    lr_min: float = option(0.0, "the last learning rate of --lr-schedule cosine", ge=0)
    lr_patience: int = option(
        10, "evaluations without improvement before --lr-schedule plateau decays", ge=0, metavar="N"
    )
    allow_nonfinite_loss: bool = option(
        False, "train on when an epoch's loss is NaN or inf (without it the run stops, naming the epoch and batch)"
    )

    def _check(self):
        super()._check()
        if self.seed + self.runs - 1 > SEED_MAX:
            raise ConfigError("runs", f"{self.runs} runs from seed {self.seed} need seeds beyond 2**64 - 1")
        for name in ("lr_step_size", "lr_gamma", "lr_min", "lr_patience"):
            if name not in LR_SCHEDULES[self.lr_schedule]:
                users = " or ".join(s for s, params in LR_SCHEDULES.items() if name in params)
                self._refuse_given((name,), f"applies to lr_schedule {users}, this run's is {self.lr_schedule!r}")
        if not self.lr_min < self.lr:
            raise ConfigError("lr_min", f"must be in [0, lr = {self.lr}), got {self.lr_min}")

    def resumable(self) -> tuple:
        """RESUMABLE, less `epochs` under a cosine schedule (which anneals over them)."""
        kept = super().resumable()
        return tuple(n for n in kept if n != "epochs") if self.lr_schedule == "cosine" else kept


class EvaluationSchema(OptionsSchema):
    """When the model is evaluated and by which metric."""

    GROUP: ClassVar[str] = "evaluation"
    eval_every: int = option(1, "evaluate every N epochs (and after the last)", ge=1)
    metric: Literal[METRICS] = option(  # type: ignore[valid-type]
        "auto",
        "auto: rocauc (OGB's ROC-AUC averaged over tasks) for a multilabel dataset, ROC AUC for 2 classes, "
        "else accuracy",
    )


class InferenceSchema(OptionsSchema):
    """How a minibatch run evaluates: exact layer-wise inference or the training fanouts."""

    GROUP: ClassVar[str] = "evaluation"
    RESUMABLE: ClassVar[tuple] = ("eval",)
    if TYPE_CHECKING:
        features: str  # SamplingSchema's, which every options class with this component has
    eval: Literal[EVAL_MODES] = option(  # type: ignore[valid-type]
        "auto",
        "evaluation: exact streaming layer-wise inference over all neighbours, or the training fanouts "
        "through the training loader (sampled); auto: sampled with --features ssd or packed",
    )
    eval_batch_size: int = option(4096, "nodes per inference batch", ge=1)

    @property
    def eval_mode(self) -> str:
        """ "sampled" or "layerwise": the evaluation `eval` asks for ("auto": sampled when features="ssd")."""
        if self.eval == "auto":
            return "sampled" if self.features in OUT_OF_CORE else "layerwise"
        return self.eval


class StreamingInferenceSchema(OptionsSchema):
    """Where and in which dtype streaming layer-wise inference keeps hidden layers' outputs."""

    GROUP: ClassVar[str] = "evaluation"
    RESUMABLE: ClassVar[tuple] = ("scratch_dir", "inference_dtype")
    scratch_dir: str | None = option(
        None,
        "where layer-wise inference keeps hidden layers' outputs (and --features ssd or packed their packed batches)",
        shown="a temporary directory",
    )
    inference_dtype: Literal[OUTPUT_DTYPES] = option(  # type: ignore[valid-type]
        "float32", "dtype of hidden layers' outputs kept by layer-wise inference"
    )

    def _check(self):
        super()._check()
        if self.scratch_dir is not None and not Path(self.scratch_dir).is_dir():
            raise ConfigError("scratch_dir", f"{self.scratch_dir} is not a directory")


class RunSchema(OptionsSchema):
    """Where and how a run trains: device, precision, checkpoints, what it shows."""

    GROUP: ClassVar[str] = "run"
    RESUMABLE: ClassVar[tuple] = ("checkpoint_dir", "resume", "progress", "epoch_table", "verify")
    device: str = option("cpu", "cpu, cuda or cuda:N")
    precision: Literal[PRECISIONS] = option(  # type: ignore[valid-type]
        "auto",
        "auto: bf16-mixed where bf16 matmuls are native (CPU with AVX512-BF16 or AMX, GPU with bf16), else 32; "
        "32-bit; bf16 autocast with fp32 weights (CPU, CUDA; fp32 matmuls on a CPU without native bf16); "
        "or fp16 autocast (CUDA)",
        absent="32",  # checkpoints from before the option trained in fp32
    )
    checkpoint_dir: str | None = option(None, "write a checkpoint here after every epoch")
    resume: bool = option(False, "continue from the checkpoint in --checkpoint-dir")
    progress: bool = option(True, "progress bars")
    verify: bool = option(
        False, "re-check the dataset's checksums and invariants before training (reads every file once)"
    )
    epoch_table: bool = option(False, "each epoch's row on stdout as it ends", cli=False)
    dataset: str | None = option(None, "the dataset's path or name (recorded)", cli=False)
    dataset_id: str | None = option(None, "the identity of the dataset's data (recorded)", cli=False)

    def _check(self):
        super()._check()
        if self.resume and self.checkpoint_dir is None:
            raise ConfigError("resume", "needs a checkpoint directory")
        if self.checkpoint_dir is not None and Path(self.checkpoint_dir).exists():
            if not Path(self.checkpoint_dir).is_dir():
                raise ConfigError("checkpoint_dir", f"{self.checkpoint_dir} exists and is not a directory")
        self._set("device", str(normalize_device(self.device)))
        self._set("precision", resolve_precision(self.precision, self.device))


class SamplingSchema(OptionsSchema):
    """Which seeds each batch holds, which neighbours it draws, and where feature rows live."""

    GROUP: ClassVar[str] = "sampling"
    RESUMABLE: ClassVar[tuple] = ("features",)
    fanouts: tuple[int, ...] = option(
        (15, 10, 5),
        "neighbours per layer, output layer first; -1 takes every neighbour (e.g. --fanouts=-1,-1)",
        metavar="N,N,...",
    )
    batch_size: int = option(1024, "seeds per minibatch", ge=1)
    prefetch: int = option(4, "minibatches prepared ahead", ge=0)
    sampling: Literal[SAMPLINGS] = option(  # type: ignore[valid-type]
        "uniform",
        "uniform: each node draws min(fanout, degree) neighbours; labor: LABOR-0 layer-neighbour sampling, each "
        "edge kept as often but draws shared across a layer (fewer input rows)",
    )
    features: Literal[FEATURES] = option(  # type: ignore[valid-type]
        "auto",
        "where feature rows live: GPU memory, pinned host memory read zero-copy, gathered by the CPU from memory "
        "or a memory map, read from the SSD with O_DIRECT (ssd: packed batches where the scratch space holds them "
        "and packing pays, else random reads), or packed: each batch's rows written ahead into one file per batch, "
        "read whole (packed)",
    )

    def _complete(self):
        super()._complete()
        if self.layers is None:
            self._set("layers", len(self.fanouts))

    def _check(self):
        super()._check()
        if not self.fanouts or any(f < -1 or f == 0 for f in self.fanouts):
            raise ConfigError("fanouts", f"must be positive counts or -1 (all), got {list(self.fanouts)}")
        if self.layers != len(self.fanouts):
            raise ConfigError("layers", f"{self.layers} layers need {self.layers} fanouts, got {list(self.fanouts)}")


class SamplerSchema(OptionsSchema):
    """Which device samples a homogeneous graph."""

    GROUP: ClassVar[str] = "sampling"
    RESUMABLE: ClassVar[tuple] = ("sampler",)
    sampler: Literal[SAMPLERS] = option(  # type: ignore[valid-type]
        "cpu", "neighbour sampler: CPU (numba) or GPU (Triton, CSC in GPU or pinned memory)"
    )


class TierSchema(OptionsSchema):
    """The software cache over the feature rows, its lookahead and the SSD tier's host-memory budget."""

    GROUP: ClassVar[str] = "feature tiers"
    RESUMABLE: ClassVar[tuple] = ("cache_rows", "cache_gb", "cache_policy", "lookahead", "victim_rows")
    RESUMABLE += ("host_mem_budget", "retain_memory", "scratch_gb")
    cache_rows: int = option(0, "software cache of this many hot feature rows (0: none)", ge=0)
    cache_gb: float | None = option(None, "software cache of this many GB of feature rows", gt=0, gb=True)
    cache_policy: Literal[RUN_POLICIES] = option(  # type: ignore[valid-type]
        "static",
        "what the cache keeps: static (out-degree), presample (hotness of sampled epochs), lru, sieve, s3fifo, "
        "or hybrid (score, reuse and the lookahead window)",
    )
    lookahead: int = option(
        0, "batches sampled ahead whose ids the cache sees (hybrid eviction, victim buffer, lookahead fill)", ge=0
    )
    victim_rows: int | None = option(
        None,
        "victim buffer rows for evicted rows needed again within the lookahead window",
        ge=0,
        shown="a quarter of the cache",
    )
    host_mem_budget: float | None = option(
        None,
        "host memory the SSD tiers may use: the cache, victim buffer and staging, or the packed batches' cache "
        "(what the rest leaves, unless a cache size is given), read buffers and packing (whose window it may shrink)",
        gt=0,
        gb=True,
    )
    scratch_gb: float | None = option(
        None,
        "disk space the packed batches may hold in --scratch-dir (two windows at a time, shrunk to fit); "
        "0 packs nothing: --features ssd reads rows at random",
        ge=0,
        gb=True,
        shown="what the disk has free",
    )
    retain_memory: bool = option(True, "keep freed memory in the process for the next step's reuse (glibc malloc)")

    @property
    def cached(self) -> bool:
        """True when a software cache is asked for."""
        return self.cache_rows > 0 or self.cache_gb is not None

    def _check(self):
        super()._check()
        if self.given("cache_rows") and self.given("cache_gb"):
            raise ConfigError("cache_gb", "give the cache size as cache_rows or cache_gb, not both")
        run_policy(self.cache_policy)
        if not self.cached:
            read_ahead = self.features == "packed"  # packed batches are read `lookahead` ahead, cached or not
            names = ("victim_rows", "cache_policy") if read_ahead else ("lookahead", "victim_rows", "cache_policy")
            self._refuse_given(names, "needs a cache (cache_rows or cache_gb)")
        if self.victim_rows is not None and not self.lookahead:
            raise ConfigError("victim_rows", f"needs lookahead > 0, got {self.victim_rows}")
        if self.features not in OUT_OF_CORE:
            self._refuse_given(("scratch_gb",), "bounds the packed batches on disk; needs features='ssd' or 'packed'")
        if self.host_mem_budget is not None and self.features not in OUT_OF_CORE:
            raise ConfigError("host_mem_budget", "bounds the SSD tiers' host memory; needs features='ssd' or 'packed'")


class DataParallelSchema(OptionsSchema):
    """Data-parallel minibatch training: processes sharing one cache."""

    GROUP: ClassVar[str] = "run"
    RESUMABLE: ClassVar[tuple] = ("replicate_frac",)
    workers: int = option(1, "data-parallel processes, each training on its shard of every epoch's seeds", ge=1)
    replicate_frac: float = option(
        0.0, "with --workers: the hottest fraction of the shared cache held by every worker", ge=0, le=1
    )

    def _check(self):
        super()._check()
        if not self.cached:
            self._refuse_given(("replicate_frac",), "needs a cache (cache_rows or cache_gb)")
        if self.workers > 1:
            self._refuse_given(("victim_rows",), "the shared cache of data-parallel workers has no victim buffer")
        else:
            self._refuse_given(("replicate_frac",), "replicates the shared cache across workers; needs workers > 1")
