"""gnnsys.samplers: neighbour samplers and the MiniBatch/Block structures."""
