"""The trainers, each standing on the shared training core: minibatch, full-graph, heterogeneous, GNNPipe."""
