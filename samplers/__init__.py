"""gnnsys.samplers: neighbour samplers, seed iteration and the MiniBatch/Block
structures, homogeneous and heterogeneous (HeteroNeighborSampler: one CSC per relation)."""

from .base import Sampler
from .block import Block, MiniBatch
from .factory import SAMPLERS, SAMPLINGS, make_sampler
from .hetero import HeteroBlock, HeteroMiniBatch, HeteroNeighborSampler
from .labor import LaborSampler
from .neighbor import NeighborSampler
from .seeds import SeedBatches

__all__ = [
    "Block",
    "HeteroBlock",
    "HeteroMiniBatch",
    "HeteroNeighborSampler",
    "LaborSampler",
    "MiniBatch",
    "NeighborSampler",
    "SAMPLERS",
    "SAMPLINGS",
    "Sampler",
    "SeedBatches",
    "make_sampler",
]
