"""pyro-bnn-zoo: sparse and shrinkage Bayesian neural networks on Pyro."""

__version__ = "0.1.0"
