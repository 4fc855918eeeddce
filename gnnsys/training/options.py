"""Typed training options: one frozen dataclass per trainer over a shared base.

Options are checked once, when built (`ConfigError` naming the option), and
then travel as these objects: the CLI builds them from its flags, the Python
API from keywords, checkpoints store `to_dict()` and compare `resume_key()`.
`for_dataset(dataset)` fills in what depends on the data (the metric "auto"
resolves to ROC AUC for two classes, else accuracy; the dataset's name) and
runs the checks that need it.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from gnnsys._capabilities import normalize_device
from gnnsys.datasets.meta_schema import identity
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.inference.rows_io import OUTPUT_DTYPES
from gnnsys.models.names import CONVS, NORMS, is_user_model
from gnnsys.runtime.precision import PRECISIONS, resolve_precision  # noqa: F401 -- PRECISIONS: the CLI's choices
from gnnsys.samplers.factory import SAMPLERS, SAMPLINGS
from gnnsys.storage.cache import run_policy
from gnnsys.storage.placement import PLACEMENTS
from gnnsys.training.given import GivenOptions, _runtime_types
from gnnsys.training.limits import SEED_MAX, check_machine, check_ranges
from gnnsys.training.tasks import METRICS as TASK_METRICS
from gnnsys.training.tasks import task_metric

FEATURES = PLACEMENTS + ("ssd", "packed")
MAX_RUNS = 100  # runs of one call (OGB's leaderboard asks for 10)
LR_SCHEDULES = {  # schedule -> the options it reads
    "none": (),
    "step": ("lr_step_size", "lr_gamma"),
    "cosine": ("lr_min",),
    "plateau": ("lr_gamma", "lr_patience"),
}
SCHEDULE_PARAMETERS = ("lr_step_size", "lr_gamma", "lr_min", "lr_patience")
MODEL_SHAPE = ("hidden", "dropout", "input_dropout", "norm", "residual", "heads")  # what a user module decides
DEEP_FROM = 4  # full-graph layers from which input_proj/residual/norm default on
EVAL_MODES = ("auto", "sampled", "layerwise")


@dataclass(frozen=True)
class TrainOptions(GivenOptions):
    """Options every trainer shares.

    model: "sage", "gcn" or "gat"; hidden: hidden width; layers: GNN layers;
    epochs, lr, weight_decay (Adam); dropout after hidden layers;
    input_dropout on the input features; norm (None, "batch", "layer") and
    residual for hidden layers; heads (GAT);
    device ("cpu", "cuda", "cuda:N"); seed; eval_every: evaluate every N
    epochs (and after the last); metric "auto", "acc", "auc" or "rocauc" (gnnsys.training.tasks);
    precision: "auto" (bf16-mixed where bf16 GEMMs are native, else "32"),
    "32", "bf16-mixed" (bf16 autocast, fp32 master weights and loss; CPU and
    CUDA; fp32 GEMMs on a CPU without native bf16) or "16-mixed" (fp16
    autocast with a gradient scaler; CUDA only), kept resolved
    (gnnsys.runtime.precision.resolve_precision); checkpoint_dir/resume: an atomic checkpoint after every
    epoch, and continuing from it; progress: progress bars; epoch_table: each epoch's row on stdout
    as it ends (gnnsys.training.loop.EpochTable); verify: re-check the prepared dataset's checksums
    and invariants before training (as `gnnsys info --verify`; reads every file once). dataset,
    dataset_id: set by `for_dataset` (the dataset's path or name, and the identity of its data:
    datasets.meta_schema.identity), recorded with the result and checkpoints.

    runs: train this many runs with seeds seed, seed + 1, ... (at most
    MAX_RUNS) and report each run's and the mean and standard deviation of
    their metrics at the epoch of best validation (gnnsys.training.runs).
    patience: stop a run when its validation metric has not improved for
    this many epochs (checked at evaluated epochs; None: never).
    lr_schedule (gnnsys.training.control): "none"; "step" (lr times
    lr_gamma every lr_step_size epochs); "cosine" (from lr down to lr_min
    over `epochs`, which a resume may then not change); "plateau" (lr times
    lr_gamma when the validation metric has not improved for lr_patience
    evaluations). A schedule's parameter given for another schedule is refused.
    allow_nonfinite_loss: train on when an epoch's loss is NaN or inf (else the run stops,
    naming the epoch and its first such batch: PyTorch Lightning's terminate_on_nan).
    model may also name a user module ("module:" + its class; set by
    `gnnsys.train(model=<nn.Module>)`), whose shape options (hidden,
    dropout, input_dropout, norm, residual, heads) are then refused.
    """

    model: str = "sage"
    hidden: int = 256
    layers: int | None = None
    epochs: int = 10
    lr: float = 0.005
    weight_decay: float = 5e-4
    dropout: float = 0.5
    input_dropout: float = 0.0
    norm: str | None = None
    residual: bool = False
    heads: int = 4
    device: str = "cpu"
    seed: int = 0
    eval_every: int = 1
    metric: str = "auto"
    precision: str = "auto"
    checkpoint_dir: str | None = None
    resume: bool = False
    progress: bool = True
    epoch_table: bool = False
    verify: bool = False
    dataset: str | None = None
    dataset_id: str | None = None
    runs: int = 1
    patience: int | None = None
    lr_schedule: str = "none"
    lr_step_size: int = 10
    lr_gamma: float = 0.1
    lr_min: float = 0.0
    lr_patience: int = 10
    allow_nonfinite_loss: bool = False
    # the options the caller gave (a value other than None), kept through dataclasses.replace: an option
    # that does not apply to the run is refused when given, whatever its value
    _given: frozenset | None = dataclasses.field(default=None, repr=False, compare=False)

    # options a resumed run may change; every other one must match the checkpoint
    RESUMABLE: ClassVar[tuple] = ("epochs", "checkpoint_dir", "resume", "progress", "epoch_table", "verify", "runs")
    RESUMABLE += ("allow_nonfinite_loss",)
    POSITIVE: ClassVar[tuple] = ("hidden", "epochs", "eval_every", "heads", "runs")

    def __post_init__(self):
        self._record_given()
        self._set("device", str(self.device) if isinstance(self.device, torch.device) else self.device)
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, str):
            self._set("checkpoint_dir", str(self.checkpoint_dir))
        self._check_types()
        self._check()

    def _set(self, name: str, value):
        object.__setattr__(self, name, value)

    def _check_types(self):
        """Each value has its field's type (ints are accepted for floats)."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value, allowed = getattr(self, f.name), _runtime_types(hints[f.name])
            if isinstance(value, int) and not isinstance(value, bool) and float in allowed:
                self._set(f.name, float(value))
            elif not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
                raise ConfigError(f.name, f"must be {names}, got {value!r}")

    def _check(self):
        if self.model not in CONVS and not is_user_model(self.model):
            raise ConfigError("model", f"must be one of {', '.join(CONVS)} or a torch.nn.Module, got {self.model!r}")
        if self.norm not in NORMS:
            raise ConfigError("norm", f"must be one of {NORMS}, got {self.norm!r}")
        for name in self.POSITIVE:
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("dropout", "input_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(name, f"must be in [0, 1), got {getattr(self, name)}")
        check_ranges(self)
        if self.resume and self.checkpoint_dir is None:
            raise ConfigError("resume", "needs a checkpoint directory")
        if (
            self.checkpoint_dir is not None
            and Path(self.checkpoint_dir).exists()
            and not Path(self.checkpoint_dir).is_dir()
        ):
            raise ConfigError("checkpoint_dir", f"{self.checkpoint_dir} exists and is not a directory")
        if self.metric not in ("auto", *TASK_METRICS):
            raise ConfigError("metric", f"must be 'auto', 'acc', 'auc' or 'rocauc', got {self.metric!r}")
        self._set("device", str(normalize_device(self.device)))
        self._set("precision", resolve_precision(self.precision, self.device))
        self._check_runs()
        self._check_schedule()
        if is_user_model(self.model):
            self._refuse_given(MODEL_SHAPE, f"shapes the built-in models; the user model {self.model} has its own")

    def _check_runs(self):
        """runs within MAX_RUNS and its seeds within SEED_MAX; patience None or >= 1."""
        if self.runs > MAX_RUNS:
            raise ConfigError("runs", f"must be at most {MAX_RUNS}, got {self.runs}")
        if self.seed + self.runs - 1 > SEED_MAX:
            raise ConfigError("runs", f"{self.runs} runs from seed {self.seed} need seeds beyond 2**64 - 1")
        if self.patience is not None and self.patience < 1:
            raise ConfigError("patience", f"must be >= 1 epochs (None: no early stopping), got {self.patience}")

    def _check_schedule(self):
        """lr_schedule is known, its parameters are in range, and no other schedule's is given."""
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError("lr_schedule", f"must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        for name in SCHEDULE_PARAMETERS:
            if name not in LR_SCHEDULES[self.lr_schedule]:
                users = " or ".join(s for s, params in LR_SCHEDULES.items() if name in params)
                self._refuse_given((name,), f"applies to lr_schedule {users}, this run's is {self.lr_schedule!r}")
        if self.lr_step_size < 1:
            raise ConfigError("lr_step_size", f"must be >= 1 epochs, got {self.lr_step_size}")
        if not 0 < self.lr_gamma < 1:
            raise ConfigError("lr_gamma", f"must be in (0, 1), got {self.lr_gamma}")
        if not 0 <= self.lr_min < self.lr:
            raise ConfigError("lr_min", f"must be in [0, lr = {self.lr}), got {self.lr_min}")
        if self.lr_patience < 0:
            raise ConfigError("lr_patience", f"must be >= 0 evaluations, got {self.lr_patience}")

    def for_dataset(self, dataset):
        """These options completed for `dataset` (metric resolved, its name
        recorded), after the `verify` check when asked for; ConfigError when
        the run would not fit this machine (limits.check_machine)."""
        if self.verify:
            _verify(dataset)
        check_machine(self, dataset)
        metric = task_metric(self, dataset)
        return dataclasses.replace(self, metric=metric, **recorded(dataset))

    def to_dict(self) -> dict:
        """Plain JSON-ready values (tuples as lists); None for an option that does not apply to the run,
        so `type(o)(**o.to_dict()) == o`."""
        return {
            f.name: None if f.name in self.inapplicable else _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "_given"
        }

    def resume_key(self) -> dict:
        """The options a checkpoint must share with the run that resumes it
        (`epochs` too under a cosine schedule, which anneals over them)."""
        return {k: v for k, v in self.to_dict().items() if k not in self.resumable()}

    def resumable(self) -> tuple:
        """The options a resumed run may change (RESUMABLE, less `epochs` under a cosine schedule)."""
        if self.lr_schedule == "cosine":
            return tuple(n for n in self.RESUMABLE if n != "epochs")
        return self.RESUMABLE

    @classmethod
    def build(cls, options=None, keywords: dict | None = None):
        """`options` (an instance of cls), or cls built from `keywords` (an
        unknown keyword is a ConfigError naming it); not both."""
        keywords = keywords or {}
        if options is not None:
            if keywords:
                raise TypeError(f"pass options or keywords, not both (got {', '.join(sorted(keywords))})")
            if not isinstance(options, cls):
                raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
            return options
        names = {f.name for f in dataclasses.fields(cls) if f.name != "_given"}
        unknown = sorted(set(keywords) - names)
        if unknown:
            raise ConfigError(unknown[0], f"is not an option of {cls.__name__} (options: {', '.join(sorted(names))})")
        return cls(**keywords)


@dataclass(frozen=True)
class MinibatchOptions(TrainOptions):
    """Options of sampled minibatch training (`gnnsys.train`).

    fanouts: neighbours per layer, output layer first, -1 for all; layers
    defaults to len(fanouts) and must equal it; batch_size seeds per batch;
    eval_batch_size nodes per inference batch; prefetch batches prepared
    ahead; features: where rows live ("auto", "gpu", "pinned", "cpu-gather"
    for a table in memory or memory-mapped, "ssd" for O_DIRECT reads of a
    prepared dataset's features.bin); cache_rows or cache_gb: a software
    cache of that many hot rows over the features (0: none), evicting by
    cache_policy ("static" out-degree, "presample" hotness, "lru", "sieve",
    "s3fifo", "hybrid"); lookahead: batches sampled ahead whose ids the cache
    sees (hybrid eviction, the victim buffer of victim_rows rows, default a
    quarter of the cache, and reading ahead the rows of the farthest batch);
    host_mem_budget: GB of host memory the SSD tier's cache, victim buffer
    and staging may use; sampler
    "cpu", "gpu" or "gpu-pinned" (these change speed, not results);
    sampling: "uniform" or "labor" (LABOR-0: same marginals, fewer input rows);
    workers: data-parallel processes, each training on its shard of every
    epoch's seeds, with one cache shared by all (replicate_frac: the hottest
    fraction of the cache held by every worker); retain_memory: keep freed
    memory for reuse (gnnsys.runtime.allocator). eval: how valid/test (and train)
    are evaluated: "layerwise" (exact streaming layer-wise inference over all
    neighbours, gnnsys.inference.layerwise), "sampled" (the trained fanouts
    through the training loader and feature tiers, with a fixed sampling
    epoch) or "auto" (sampled with features="ssd", else layerwise);
    scratch_dir and inference_dtype: where layer-wise evaluation keeps
    hidden layers' outputs (default a temporary directory) and in which
    dtype ("float32", "bfloat16", "float16"); it holds at most
    host_mem_budget GB per layer when that is set (else 1 GB).
    """

    fanouts: tuple = (15, 10, 5)
    batch_size: int = 1024
    eval_batch_size: int = 4096
    prefetch: int = 4
    features: str = "auto"
    sampler: str = "cpu"
    sampling: str = "uniform"
    cache_rows: int = 0
    cache_gb: float | None = None
    cache_policy: str = "static"
    lookahead: int = 0
    victim_rows: int | None = None
    host_mem_budget: float | None = None
    workers: int = 1
    replicate_frac: float = 0.0
    retain_memory: bool = True
    eval: str = "auto"
    scratch_dir: str | None = None
    inference_dtype: str = "float32"

    RESUMABLE: ClassVar[tuple] = TrainOptions.RESUMABLE + (
        "features",
        "sampler",
        "cache_rows",
        "cache_gb",
        "cache_policy",
        "lookahead",
        "victim_rows",
        "host_mem_budget",
        "replicate_frac",
        "retain_memory",
        "eval",
        "scratch_dir",
        "inference_dtype",
    )
    POSITIVE: ClassVar[tuple] = TrainOptions.POSITIVE + ("batch_size", "eval_batch_size", "workers")

    def __post_init__(self):
        if isinstance(self.fanouts, (list, tuple)):
            self._set("fanouts", tuple(self.fanouts))
        if isinstance(self.fanouts, tuple) and self.layers is None:
            self._set("layers", len(self.fanouts))
        if self.scratch_dir is not None and not isinstance(self.scratch_dir, str):
            self._set("scratch_dir", str(self.scratch_dir))
        super().__post_init__()

    def _check(self):
        super()._check()
        if not self.fanouts or any(not isinstance(f, int) or f < -1 or f == 0 for f in self.fanouts):
            raise ConfigError("fanouts", f"must be positive counts or -1 (all), got {list(self.fanouts)}")
        if self.layers != len(self.fanouts):
            raise ConfigError("layers", f"{self.layers} layers need {self.layers} fanouts, got {list(self.fanouts)}")
        if self.prefetch < 0:
            raise ConfigError("prefetch", f"must be >= 0, got {self.prefetch}")
        for name, allowed in (("features", FEATURES), ("sampler", SAMPLERS), ("sampling", SAMPLINGS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(name, f"must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        self._check_tiers()
        self._check_eval()

    @property
    def eval_mode(self) -> str:
        """ "sampled" or "layerwise": the evaluation `eval` asks for ("auto": sampled when features="ssd")."""
        if self.eval == "auto":
            return "sampled" if self.features == "ssd" else "layerwise"
        return self.eval

    def _check_eval(self):
        """eval is known, and the layer-wise inference options are given only for layer-wise evaluation."""
        if self.eval not in EVAL_MODES:
            raise ConfigError("eval", f"must be one of {', '.join(EVAL_MODES)}, got {self.eval!r}")
        if self.inference_dtype not in OUTPUT_DTYPES:
            raise ConfigError(
                "inference_dtype", f"must be one of {', '.join(OUTPUT_DTYPES)}, got {self.inference_dtype!r}"
            )
        if self.eval_mode == "sampled":
            self._refuse_given(
                ("scratch_dir", "inference_dtype"),
                "applies to layer-wise evaluation, but this run evaluates sampled "
                f"(eval={self.eval!r}, features={self.features!r}); add eval='layerwise'",
            )
        if self.scratch_dir is not None and not Path(self.scratch_dir).is_dir():
            raise ConfigError("scratch_dir", f"{self.scratch_dir} is not a directory")

    @property
    def cached(self) -> bool:
        """True when a software cache is asked for."""
        return self.cache_rows > 0 or self.cache_gb is not None

    def _check_tiers(self):
        """The cache, lookahead, budget and data-parallel options fit together."""
        if self.cache_rows < 0:
            raise ConfigError("cache_rows", f"must be >= 0, got {self.cache_rows}")
        if self.cache_gb is not None and not (math.isfinite(self.cache_gb) and self.cache_gb > 0):
            raise ConfigError("cache_gb", f"must be a number of GB > 0, got {self.cache_gb}")
        if self.given("cache_rows") and self.given("cache_gb"):
            raise ConfigError("cache_gb", "give the cache size as cache_rows or cache_gb, not both")
        run_policy(self.cache_policy)
        if self.lookahead < 0:
            raise ConfigError("lookahead", f"must be >= 0, got {self.lookahead}")
        if not self.cached:
            self._refuse_given(
                ("lookahead", "victim_rows", "replicate_frac", "cache_policy"), "needs a cache (cache_rows or cache_gb)"
            )
        if self.victim_rows is not None and (self.victim_rows < 0 or not self.lookahead):
            raise ConfigError("victim_rows", f"must be >= 0 and needs lookahead > 0, got {self.victim_rows}")
        if self.host_mem_budget is not None:
            if self.features != "ssd":
                raise ConfigError("host_mem_budget", "bounds the SSD tier's host memory; needs features='ssd'")
            if not (math.isfinite(self.host_mem_budget) and self.host_mem_budget > 0):
                raise ConfigError("host_mem_budget", f"must be a number of GB > 0, got {self.host_mem_budget}")
        if not 0 <= self.replicate_frac <= 1:
            raise ConfigError("replicate_frac", f"must be in [0, 1], got {self.replicate_frac}")
        if self.workers > 1:
            self._refuse_given(("victim_rows",), "the shared cache of data-parallel workers has no victim buffer")
        else:
            self._refuse_given(("replicate_frac",), "replicates the shared cache across workers; needs workers > 1")


def recorded(dataset) -> dict:
    """The options that record `dataset`: its path (or name) and the identity of its data."""
    return {
        "dataset": str(dataset.path) if dataset.path is not None else dataset.name,
        "dataset_id": identity(dataset.meta),
    }


def _verify(dataset):
    """DatasetError unless every checksum and invariant of the prepared dataset holds."""
    from gnnsys.datasets.file_identity import check_unchanged
    from gnnsys.datasets.inspect import verify

    if dataset.path is None:
        raise ConfigError("verify", "needs a prepared dataset directory, got an in-memory dataset")
    problems = verify(dataset.path)
    check_unchanged(dataset)  # verify read the files at the path: they must be those the run loaded
    if problems:
        more = f" (and {len(problems) - 1} more; see gnnsys info --verify)" if len(problems) > 1 else ""
        raise DatasetError(dataset.path, f"--verify failed: {problems[0]}{more}")


def _plain(value):
    return list(value) if isinstance(value, tuple) else value
