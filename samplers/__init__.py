"""gnnsys.samplers: neighbour samplers, seed iteration and the MiniBatch/Block structures."""
from .base import Sampler
from .block import Block, MiniBatch
from .factory import SAMPLERS, make_sampler
from .neighbor import NeighborSampler
from .seeds import SeedBatches

__all__ = ["Block", "MiniBatch", "NeighborSampler", "SAMPLERS", "Sampler", "SeedBatches", "make_sampler"]
