"""The options of the trainers: each class combines the components it takes
(gnnsys.training.components; each option described once in
gnnsys.training.schema's terms), checked when built (`ConfigError`
naming the option).

Options then travel as these objects: the CLI builds them from its flags
(generated from the same fields), the Python API from keywords,
checkpoints store `to_dict()` and compare `resume_key()`.
`for_dataset(dataset)` fills in what depends on the data (the metric "auto"
resolves to ROC AUC for two classes, else accuracy; the dataset's name and
the identity of its data) and runs the checks that need it.
"""

from __future__ import annotations

from gnnsys.datasets.meta_schema import identity
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.training.components import (
    EVAL_MODES,  # noqa: F401 -- the trainers' names for these
    FEATURES,  # noqa: F401
    LR_SCHEDULES,  # noqa: F401
    MAX_RUNS,  # noqa: F401
    OUT_OF_CORE,
    DataParallelSchema,
    EvaluationSchema,
    HiddenLayersSchema,
    InferenceSchema,
    ModelSchema,
    OptimisationSchema,
    RunSchema,
    SamplerSchema,
    SamplingSchema,
    StreamingInferenceSchema,
    TierSchema,
)
from gnnsys.training.limits import check_machine
from gnnsys.training.tasks import task_metric

DEEP_FROM = 4  # full-graph layers from which input_proj/residual/norm default on


class TrainOptions(ModelSchema, OptimisationSchema, EvaluationSchema, RunSchema):
    """Options every trainer shares: the model, optimisation, evaluation and
    run components (gnnsys.training.components; `gnnsys train --help` and
    the options table of the training guide describe each field).

    model may also name a user module ("module:" + its class; set by
    `gnnsys.train(model=<nn.Module>)`), whose shape options (hidden,
    dropout, input_dropout, norm, residual, heads) are then refused.
    """

    def for_dataset(self, dataset):
        """These options completed for `dataset` (metric resolved, its name
        recorded), after the `verify` check when asked for; ConfigError when
        the run would not fit this machine (limits.check_machine)."""
        if self.verify:
            _verify(dataset)
        check_machine(self, dataset)
        return self.replace(metric=task_metric(self, dataset), **recorded(dataset))


class MinibatchOptions(
    TrainOptions,
    HiddenLayersSchema,
    SamplingSchema,
    SamplerSchema,
    TierSchema,
    DataParallelSchema,
    InferenceSchema,
    StreamingInferenceSchema,
):
    """Options of sampled minibatch training (`gnnsys.train`): TrainOptions'
    with the hidden layers' shape, sampling, the feature tiers, data
    parallelism and evaluation by inference (gnnsys.training.components)."""

    def _check(self):
        super()._check()
        if self.eval_mode == "sampled":
            packs = self.features in OUT_OF_CORE  # the scratch directory may hold packed batches
            self._refuse_given(
                ("inference_dtype",) if packs else ("scratch_dir", "inference_dtype"),
                "applies to layer-wise evaluation, but this run evaluates sampled "
                f"(eval={self.eval!r}, features={self.features!r}); add eval='layerwise'",
            )


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
