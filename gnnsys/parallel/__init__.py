"""Several processes: launching them, how ranks talk, graph partitions, data-parallel training."""
