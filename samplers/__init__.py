"""gnnsys.samplers: neighbour samplers, seed iteration and the MiniBatch/Block structures."""

from .base import Sampler
from .block import Block, MiniBatch
from .factory import SAMPLERS, SAMPLINGS, make_sampler
from .labor import LaborSampler
from .neighbor import NeighborSampler
from .seeds import SeedBatches

__all__ = [
    "Block",
    "LaborSampler",
    "MiniBatch",
    "NeighborSampler",
    "SAMPLERS",
    "SAMPLINGS",
    "Sampler",
    "SeedBatches",
    "make_sampler",
]
