"""Offline, deterministic replay of clusters and traces through :mod:`extender.core`.

Must NOT import the extender's adapters (``extender.kube``, ``extender.server``, ``extender.cli``)
or any Kubernetes client: the simulator predicts what the extender decides by running the same
core, and nothing else.
"""
