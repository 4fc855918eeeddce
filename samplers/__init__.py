"""gnnsys.samplers: neighbour samplers, seed iteration and the MiniBatch/Block structures."""
from .block import Block, MiniBatch
from .neighbor import NeighborSampler
from .seeds import SeedBatches

__all__ = ["Block", "MiniBatch", "NeighborSampler", "SeedBatches"]
