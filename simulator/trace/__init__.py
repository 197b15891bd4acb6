"""The FGD trace replay: a GPU-sharing pod trace (Alibaba openb) replayed the way the FGD paper
did, with its node-scoring policies (``simulator.policies``).

This half of the simulator makes no gang decision and does not use the gang session: the
trace's pods are independent. The gang replay (``simulator.simulation``) is the other half.
"""
