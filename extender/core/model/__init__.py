"""Values: what the core reasons about, and how Kubernetes objects become them.

Owns pods, nodes, gangs and workloads as frozen values (``values``), quantities and resource
sets, the immutable cluster snapshot with the data derived from it once, the events Muster
writes (``notices``), the parsing of Pod and Node objects (``objects``, ``podspec``), and
durations as Kubernetes spells them (``durations``: Go's ``time.ParseDuration``).

Must never: import another sub-package of the core, decide anything about a gang, or do I/O.
"""
