"""gnnsys.samplers: neighbour samplers and the MiniBatch/Block structures."""
from .block import Block, MiniBatch

__all__ = ["Block", "MiniBatch"]
