"""Decisions over time: the gang session and the four extender verbs.

Owns :class:`~extender.core.decide.session.GangSession` (the one place a pod's filter, bind,
preempt and the passage of time are decided, for the server and the simulator alike), the
verbs it calls (``decisions``; ``barrier`` for bind), the effects it returns as values, the
held bind requests, deadlock yields and the wait-for graph, ``muster fit``, and the one
source of defaults (``settings``).

Must never: block, hold a lock, read a clock or do I/O: the adapters (``extender.server``,
``simulator``) carry out its effects.
"""
