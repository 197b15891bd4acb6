"""NVIDIA Workload Map (Karta) documents: compiled, and translated into Muster descriptors.

Owns the Karta format (``model``), its JSONPath and jq subsets, KAI's gang minimums, and the
translation to native descriptors with notes on what cannot be said (``native``).

Must never: decide scheduling, or do I/O. It builds on ``extender.core.workloads``.
"""
