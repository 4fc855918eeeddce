"""The training core every trainer stands on (docs/architecture.md):

- `options`: typed, checked options (TrainOptions, MinibatchOptions, FullGraphOptions);
- `loop`: the epoch loop (evaluate every k epochs, checkpoint, callback,
  progress bar) and the per-epoch record;
- `result`: TrainResult, the best epoch, machine info;
- `checkpoints`: atomic save, resume, what is resumable;
- `evaluation`, `metrics`, `inference`: split scores, accuracy / ROC AUC,
  exact layer-wise inference.

The minibatch trainer (gnnsys.trainers.minibatch), the full-graph reference
(gnnsys.trainers.fullgraph) and GNNPipe (gnnsys.trainers.gnnpipe) each add only their epoch.
"""

from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.options import MinibatchOptions, TrainOptions
from gnnsys.training.result import TrainResult

__all__ = ["FullGraphOptions", "MinibatchOptions", "TrainOptions", "TrainResult"]
