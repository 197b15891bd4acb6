"""Workload descriptors and resolution: from a tree of Kubernetes objects to gangs.

Owns descriptor paths and expressions, the descriptor format and its catalog, reading a
workload's roles, counts and topology, cutting it into gangs, finding each pod's workload and
gang (membership), and building a resolved snapshot of a cluster (``cluster``).

Must never: know about capacity, plans or the barrier (``extender.core.gang`` and
``extender.core.decide``), or do I/O. It imports only ``extender.core.model.values``.
"""
