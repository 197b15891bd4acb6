"""Muster: gang scheduling for AI workloads with the stock kube-scheduler."""

__version__ = "0.1.0"
