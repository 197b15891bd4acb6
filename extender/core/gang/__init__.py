"""Gang placement and what Muster has promised: capacity, constraints, search, the ledger.

Owns per-device GPU capacity arithmetic, node constraints (selectors, affinity, taints,
exclusive domains), scoring policies, the placement search that places a whole gang or says
why it cannot, and the ledger of plans, pods in flight and barriers.

Must never: read a clock (time is ``now``), know how a workload is described
(``extender.core.workloads``), or talk to kube-scheduler: the verbs live in
``extender.core.decide``. It imports only ``extender.core.model.values``.
"""
