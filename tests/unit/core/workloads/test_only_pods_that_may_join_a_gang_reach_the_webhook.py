"""The webhook's may-join-a-gang matchCondition (:func:`may_join_a_gang`): the API server
skips the call only for pods no descriptor of the catalog can put in a gang, pods with no
owner and none of the descriptors' workload labels. Muster would not gate such a pod anyway
(:func:`gate_verdict`), so the condition spares the call and changes no verdict."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.workloads.admission import gate_verdict, may_join_a_gang
from extender.core.workloads.membership import ObjectIndex
from extender.files.catalog import load_catalog, packaged_catalog, packaged_catalog_dir

CATALOG = packaged_catalog()
LABELS = sorted({d.pods.workload_label for d in CATALOG.descriptors if d.pods.workload_label})


def test_the_packaged_catalog_asks_about_owned_pods_and_every_workload_label() -> None:
    expression = may_join_a_gang(CATALOG)
    assert expression is not None
    assert expression.startswith("has(object.metadata.ownerReferences) || ")
    assert "jobset.sigs.k8s.io/jobset-name" in LABELS and "ray.io/cluster" in LABELS
    for label in LABELS:
        assert f"'{label}'" in expression


def test_when_bare_pods_can_be_gangs_every_pod_is_asked_about(tmp_path: Path) -> None:
    pod = (packaged_catalog_dir() / "pod.yaml").read_text()
    assert "policy: none" in pod
    (tmp_path / "pod.yaml").write_text(pod.replace("policy: none", "policy: workload"))
    assert may_join_a_gang(load_catalog([packaged_catalog_dir(), tmp_path])) is None


@settings(max_examples=200, deadline=None)
@given(labels=st.dictionaries(
    st.sampled_from([*LABELS, "app", "team", "example.com/role", "kueue.x-k8s.io/queue-name"]),
    st.sampled_from(["web", "train", "x"]), max_size=4))
def test_a_pod_the_condition_skips_is_one_muster_would_not_gate(labels: dict[str, str]) -> None:
    pod = {"metadata": {"name": "p", "namespace": "ml", "labels": labels},
           "spec": {"schedulerName": "muster", "containers": [{
               "name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    skipped = not any(label in labels for label in LABELS)  # and it has no owner
    verdict = gate_verdict(pod, objects=ObjectIndex.of([]), catalog=CATALOG, workloads={},
                           scheduler_names=("muster",))
    if skipped:
        assert not verdict.gate, verdict
    else:  # asked about; a label naming a workload not observed yet may gate it for now
        assert verdict.gate == verdict.pending
