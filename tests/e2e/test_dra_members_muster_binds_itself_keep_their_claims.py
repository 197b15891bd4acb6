"""Gang members Muster binds itself end on their claims' node with the claims reserved for them.

A member whose bind request cannot be held (every server thread that may hold one is in use)
is *parked*: its request is refused, kube-scheduler's Unreserve takes the pod out of its
claim's ``status.reservedFor`` (leaving the claim allocated, for its PostFilter to free), and
Muster binds the pod itself when its gang completes. Muster binds it only where its claim is
still allocated, reserving the claim for it first (kube-controller-manager would reserve it
too, once it saw the pod bound): a kubelet prepares a claim's devices only for a pod in
``reservedFor``. With the real kube-scheduler, kube-controller-manager and JobSet controller.

Muster serves on 4 threads here, so at most 2 binds are held and a gang of 6 parks members.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.sandbox.dra import GpuModel
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import pods_in, scratch_namespace, start_sandbox
from tests.e2e.test_dra_gangs_are_bound_whole import (
    apply,
    claim_template,
    jobset,
    of,
    owned_claims,
    reserved_for,
    started,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def few_threads_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """3 DRA nodes of 8 GPUs, the real JobSet controller, Muster on 4 server threads."""
    previous = os.environ.get("MUSTER_THREADS")
    os.environ["MUSTER_THREADS"] = "4"
    try:
        box = start_sandbox(tmp_path_factory.mktemp("dra-parked"), gpu_model=GpuModel.DRA,
                            dra_nodes=3, jobset=True)
    finally:
        if previous is None:
            del os.environ["MUSTER_THREADS"]
        else:
            os.environ["MUSTER_THREADS"] = previous
    try:
        yield box
    finally:
        box.down()


def test_members_muster_binds_itself_have_their_claims_reserved_for_them(
        few_threads_box: Sandbox) -> None:
    box = few_threads_box
    with scratch_namespace(box.connection(), "parked") as ns:
        apply(box, claim_template(ns, "four", count=4), jobset(ns, "train", pods=6, claim="four"))
        started(box, ns, "train", pods=6)
        log = Path(box.dir / "muster.log").read_text(errors="replace").splitlines()
        parked = [line for line in log
                  if f"pod={ns}/train-" in line and "outcome=parked-bound" in line]
        assert parked, "no member was bound by Muster itself: nothing here was tested"
        assert not [line for line in log if "outcome=parked-error" in line]
        conn = box.connection()
        for pod in of(pods_in(conn, ns), "train"):
            [made] = owned_claims(box, ns, pod)
            terms = made["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            assert [f["values"] for t in terms for f in t["matchFields"]] == [
                [pod["spec"]["nodeName"]]], (pod["metadata"]["name"], terms)
            assert reserved_for(made) == [pod["metadata"]["name"]], (
                pod["metadata"]["name"], made["status"])
