"""The pure core of Muster, shared verbatim by the extender and the simulator.

Must NOT: do I/O (network, files, processes), read a clock (time is the argument ``now``),
use randomness, log, or import flask, kubernetes or any adapter. import-linter enforces this.
"""
