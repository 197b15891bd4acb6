"""Node-scoring policies of the FGD paper, one module each, and their registry."""

from __future__ import annotations

from simulator.policies.base import Policy, PolicyFactory
from simulator.policies.bestfit import BestFit
from simulator.policies.dotprod import DotProduct
from simulator.policies.fgd import FragmentationGradientDescent
from simulator.policies.gpuclustering import GpuClustering
from simulator.policies.gpupacking import GpuPacking
from simulator.policies.random_fit import RandomFit

#: Policy name (as on the command line) -> constructor taking the typical pods.
POLICIES: dict[str, PolicyFactory] = {
    "random": lambda typical: RandomFit(),
    "dotprod": lambda typical: DotProduct(),
    "gpuclustering": lambda typical: GpuClustering(),
    "gpupacking": lambda typical: GpuPacking(),
    "bestfit": lambda typical: BestFit(),
    "fgd": FragmentationGradientDescent,
}

#: The paper's order (also its ranking from worst to best on the default trace).
PAPER_ORDER: tuple[str, ...] = tuple(POLICIES)

__all__ = ["PAPER_ORDER", "POLICIES", "Policy", "PolicyFactory"]
