"""Resolution costs what the roles cost, never what a replica count says (issue 16): counts
beyond int32 are refused as the API server refuses them, and a workload beyond the configured
pods or gangs is refused whole, naming it and the limit, in well under a second."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from extender.core.decide.settings import CoreSettings
from extender.core.workloads.cluster import build_snapshot
from extender.core.workloads.errors import DescriptionError
from extender.core.workloads.workload import (
    DEFAULT_LIMITS,
    INT32_MAX,
    WorkloadError,
    WorkloadLimits,
    resolve_workload,
)
from extender.files.catalog import yaml_documents
from tests.unit.cli.helpers import DATA, muster
from tests.unit.descriptors.examples import catalog

HOSTILE = DATA / "hostile"


def _lws(replicas: object, size: object = 5) -> dict[str, Any]:
    file = HOSTILE / "lws-million-replicas.yaml"
    [(_, obj), *_] = list(yaml_documents(file.read_text(), str(file)))
    obj = copy.deepcopy(obj)
    obj["spec"]["replicas"] = replicas
    obj["spec"]["leaderWorkerTemplate"]["size"] = size
    return obj


def _resolve(obj: dict[str, Any], limits: WorkloadLimits = DEFAULT_LIMITS) -> Any:
    descriptor = catalog().for_object(obj)
    assert descriptor is not None
    return resolve_workload(obj, descriptor, limits)


def test_a_million_replica_lws_is_refused_in_well_under_a_second_naming_the_limit():
    obj = _lws(1_000_000)
    _resolve(_lws(1))  # the catalog compiled, so only resolution is timed
    started = time.perf_counter()
    with pytest.raises(WorkloadError, match=r"^LeaderWorkerSet/llamacpp-\S+: 5000000 pods is "
                                            "more than the limit of 150000 pods per workload"):
        _resolve(obj)
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize(("replicas", "size", "field"), [
    (10**20, 5, r"\(spec\.roles\[0\]\): \$\.spec\.replicas: 1\.000e\+20"),
    (INT32_MAX + 1, 5, rf"\(spec\.roles\[0\]\): \$\.spec\.replicas: {INT32_MAX + 1}"),
    (2, INT32_MAX + 1, rf"\$\.spec\.leaderWorkerTemplate\.size: {INT32_MAX + 1}"),
])
def test_counts_beyond_int32_are_refused_with_the_field_named(replicas: int, size: int,
                                                              field: str):
    obj = _lws(replicas, size)
    started = time.perf_counter()
    with pytest.raises(WorkloadError, match=field) as err:
        _resolve(obj)
    assert "beyond int32 (2147483647)" in str(err.value)
    assert time.perf_counter() - started < 0.1


def test_int32_counts_multiplied_out_are_arithmetic_and_stop_at_the_pod_limit():
    obj = _lws(INT32_MAX)
    started = time.perf_counter()
    with pytest.raises(WorkloadError, match=f"{INT32_MAX * 5} pods is more than the limit"):
        _resolve(obj)
    assert time.perf_counter() - started < 0.1


def test_the_gang_limit_stops_cutting_gangs_at_the_limit():
    started = time.perf_counter()
    with pytest.raises(WorkloadError, match=r"more than the limit of 10000 gangs per workload "
                                            r"\(gang policy replica\)"):
        _resolve(_lws(100_000, 1))
    assert time.perf_counter() - started < 1
    assert len(_resolve(_lws(10_000, 1)).gangs) == 10_000


def test_limits_are_configurable_in_the_core_settings():
    limits = CoreSettings(workload_limits=WorkloadLimits(pods=10, gangs=2)).workload_limits
    assert _resolve(_lws(2, 5), limits).pods == 10
    with pytest.raises(WorkloadError, match="11 pods is more than the limit of 10 pods"):
        _resolve(_lws(1, 11), limits)
    with pytest.raises(WorkloadError, match="more than the limit of 2 gangs"):
        _resolve(_lws(3, 1), limits)
    with pytest.raises(DescriptionError, match=r"WorkloadLimits\.gangs must be positive"):
        WorkloadLimits(gangs=0)


def test_a_snapshot_leaves_out_the_workload_beyond_its_limits_and_keeps_the_rest():
    small, big = _lws(1, 2), _lws(1_000_000)
    big["metadata"]["name"] = "big"
    snapshot = build_snapshot(nodes=[], pods=[], objects=[small, big], catalog=catalog(),
                              limits=WorkloadLimits())
    assert [w.ref.name for w in snapshot.workloads.values()] == [small["metadata"]["name"]]


@pytest.mark.parametrize("name", ["lws-million-replicas.yaml", "lws-1e20-replicas.yaml"])
def test_the_command_line_answers_hostile_replica_counts_at_once(capsys, name: str):
    started = time.monotonic()
    ran = muster(capsys, "describe", "-f", HOSTILE / name)
    assert time.monotonic() - started < 5
    assert ran.code == 1 and "Traceback" not in ran.err
    assert "pods per workload" in ran.err or "beyond int32" in ran.err


def _jobset(spec: object) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js"}, **({} if spec is None else {"spec": spec})}


@pytest.mark.parametrize("jobs", ["workers", 3, True])
def test_a_foreach_container_of_the_wrong_type_is_an_error_naming_it(jobs: object):
    with pytest.raises(WorkloadError, match=r"^JobSet/js: \$\.spec\.replicatedJobs: expected a "
                                            "list or a map"):
        _resolve(_jobset({"replicatedJobs": jobs}))


def test_a_template_that_is_not_an_object_is_an_error_naming_role_and_path():
    spec = {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": "pod"}}}]}
    with pytest.raises(WorkloadError, match=r"role 'w' \(spec\.roles\[0\]\): "
                                            r"\$\.template\.spec\.template: expected an object"):
        _resolve(_jobset(spec))


@pytest.mark.parametrize("spec", [None, {}, {"replicatedJobs": []}])
def test_a_workload_whose_roles_are_found_nowhere_carries_a_warning_naming_the_path(spec):
    tree = _resolve(_jobset(spec))
    assert tree.pods == 0
    assert tree.warnings == ("no roles: $.spec.replicatedJobs[*] found nothing, so it makes no "
                             "pods (is a field its kind requires missing?)",)


def test_roles_left_out_on_purpose_carry_no_warning():
    spec = {"replicatedJobs": [{"name": "w", "replicas": 0,
                                "template": {"spec": {"template": {"spec": {}}}}}]}
    assert _resolve(_jobset(spec)).warnings == ()
