"""Minibatches for training: the pipelined loader and the option objects it takes."""
