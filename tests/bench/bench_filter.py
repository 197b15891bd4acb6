"""Filter decision for a member whose gang is already planned (target: under 100 us), and the
bind decision that follows (it re-checks the node still has room).

Run: ``.venv/bin/python tests/bench/bench_filter.py``. The baseline, measured in the same run,
is a plain loop over the same candidate nodes checking ``Resources.fits_in`` once per node.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from extender.core.decide.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    decide_bind,
    decide_filter,
)
from extender.core.gang.ledger import Ledger
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, uid

NODES = 5_000
CANDIDATES = 100


def per_call(fn: Callable[[], object], *, calls: int = 2_000, repeat: int = 7) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls)
    return statistics.median(runs)


def main() -> None:
    nodes = [make_node(f"node-{i:05d}", gpus=8) for i in range(NODES)]
    gang = make_gang("llama", roles=[("worker", 64, make_shape(gpus=8))])
    snap = make_snapshot(nodes, gangs=[gang])
    ledger = Ledger()
    settings = CoreSettings()
    first = snap.pods[uid(gang, "worker", 0)]
    names = [n.name for n in nodes]
    planned = decide_filter(first, names, snapshot=snap, ledger=ledger, now=0.0,
                            settings=settings)
    assert planned.outcome is FilterOutcome.PLANNED, planned.reason
    member = snap.pods[uid(gang, "worker", 1)]
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    # kube-scheduler sends a sample of nodes that includes the planned ones.
    candidates = sorted({*plan.nodes_for("worker")[:10], *names[-CANDIDATES:]})[:CANDIDATES]
    candidates = [NodeName(n) for n in candidates]

    def decide() -> object:
        return decide_filter(member, candidates, snapshot=snap, ledger=ledger, now=1.0,
                             settings=settings)

    decision = decide()
    assert decision.outcome is FilterOutcome.PINNED and decision.passed, decision  # type: ignore[attr-defined]
    demand = member.shape.requests
    allocs = [snap.nodes[n].allocatable for n in candidates]
    baseline = per_call(lambda: [demand.fits_in(a) for a in allocs])
    pinned = per_call(decide)
    print(f"cluster: {NODES} nodes; gang: 64 pods planned; {len(candidates)} candidates")
    print(f"baseline (fits_in loop over {len(candidates)} candidates): {baseline * 1e6:8.1f} us")
    print(f"filter of a planned member:                 {pinned * 1e6:8.1f} us "
          f"= {pinned / baseline:5.2f}x baseline   target < 100 us: "
          f"{'MET' if pinned < 100e-6 else 'MISSED'}")

    # Bind: 63 members held at the barrier, then the bind of one more (the room check sees
    # the held members in flight and the gang's own reservation); each run on a fresh copy.
    held = ledger.clone()
    node = plan.nodes_for("worker")
    for i in range(1, 63):
        outcome = decide_bind(uid(gang, "worker", i), node[i], snapshot=snap, ledger=held,
                              now=2.0, settings=settings).outcome
        assert outcome is BindOutcome.WAIT, outcome
    last = uid(gang, "worker", 63)
    copies = [held.clone() for _ in range(2_000 * 7)]
    it = iter(copies)

    def bind() -> object:
        return decide_bind(last, node[63], snapshot=snap, ledger=next(it), now=3.0,
                           settings=settings)

    binding = per_call(bind)
    print(f"bind of a member, 62 held at the barrier:   {binding * 1e6:8.1f} us "
          f"= {binding / baseline:5.2f}x baseline")


if __name__ == "__main__":
    main()
