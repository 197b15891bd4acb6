"""What a sandbox is made of, without starting it: ports, directory, scheduler profiles, the
real controllers' command lines, the KWOK Stages and what the stand-ins hand to them."""

from __future__ import annotations

import base64
import random
import socket
from pathlib import Path

import pytest
import yaml

from extender.cli.main import build_parser
from extender.cli.sandbox import _spec
from extender.core.workloads.admission import may_join_a_gang
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog, packaged_catalog_dir
from extender.sandbox.components import (
    CONTROLLERS,
    KWOK_STAGES,
    RUNTIME_ANNOTATION,
    SHUTDOWN_ANNOTATION,
    controller_manager_argv,
    kwok_argv,
)
from extender.sandbox.config import GateBy, Ports, SchedulerMode, scheduler_config
from extender.sandbox.controllers import STAND_IN_MANAGER, children
from extender.sandbox.local import (
    LOWEST_PORT,
    OWN_ENTRIES,
    SandboxError,
    clear_own,
    ephemeral_low,
    free_ports,
)
from extender.sandbox.nodes import FAKE_NODE_ANNOTATION, fake_node
from extender.sandbox.operators import (
    JOBSET,
    KUBERAY,
    KUEUE,
    LWS,
    MPI_OPERATOR,
    OPERATOR_LABEL,
    TRAINER,
    argv,
    config_file,
    crds,
    webhook_configurations,
)
from extender.sandbox.provision import gate_policy, gate_webhook
from extender.sandbox.spec import SandboxSpec


def test_ports_not_given_are_picked_distinct_and_given_ones_are_kept() -> None:
    ports = Ports(apiserver=26443).resolved(free_ports)
    values = list(ports.__dict__.values())
    assert ports.apiserver == 26443
    assert all(values) and len(set(values)) == len(values)
    assert Ports(muster=28888).chosen() == {"muster": 28888}


def test_picked_ports_are_below_the_kernels_ephemeral_range_so_no_client_connection_takes_one(
        ) -> None:
    # A port in the ephemeral range may be taken as the local end of any outgoing connection
    # while its component is down. (This guard was first taken for the cause of a CI failure
    # on the extender's port; the cause was a killed worker's threads still holding it, see
    # test_killing_a_component_frees_its_port.py.)
    low = ephemeral_low()
    assert low > LOWEST_PORT + 1000  # this machine leaves room below its range
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(LOWEST_PORT <= p < low for p in ports)


def test_a_port_in_use_is_never_picked() -> None:
    taken = free_ports(1, rng=random.Random(3))[0]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", taken))
        busy.listen()
        again = free_ports(1, rng=random.Random(3))  # the same first draw, now in use
    assert again != [taken]


def test_up_clears_only_what_a_sandbox_wrote_in_its_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "etcd").mkdir()
    (tmp_path / "etcd" / "member").write_text("stale")
    (tmp_path / "kube-apiserver.log").write_text("old log")
    (tmp_path / "my.log").write_text("not a component's")
    clear_own(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my.log", "notes.txt"]
    assert "notes.txt" not in OWN_ENTRIES


def test_the_scheduler_serves_both_the_default_name_and_muster_with_the_extender() -> None:
    config = scheduler_config(kubeconfig=Path("/k"), mode=SchedulerMode.MUSTER,
                              muster_port=1, bind_timeout=20.0)
    profiles = config["profiles"]
    assert isinstance(profiles, list)
    assert [p["schedulerName"] for p in profiles] == ["default-scheduler", "muster"]
    assert config["extenders"]


def test_the_controller_manager_runs_no_node_lifecycle_eviction_and_no_cloud() -> None:
    argv = controller_manager_argv(Path("/bin"), kubeconfig=Path("/k"), port=1234)
    controllers = next(a for a in argv if a.startswith("--controllers=")).split("=", 1)[1]
    assert controllers.split(",") == list(CONTROLLERS)
    assert "job-controller" in CONTROLLERS and "garbage-collector-controller" in CONTROLLERS
    assert not {"node-lifecycle-controller", "taint-eviction-controller",
                "cloud-node-lifecycle-controller"} & set(CONTROLLERS)
    assert "--secure-port=1234" in argv and "--bind-address=127.0.0.1" in argv


def test_kwok_manages_the_fake_nodes_with_every_stage_file() -> None:
    argv = kwok_argv(Path("/bin"), kubeconfig=Path("/k"), port=9)
    assert f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=true" in argv
    configs = [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    assert sorted(Path(c).name for c in configs) == ["nodes.yaml", "pods.yaml"]
    node = fake_node(0, gpus=8, ready=False)
    assert node["metadata"]["annotations"][FAKE_NODE_ANNOTATION] == "true"
    assert "conditions" not in node["status"]  # KWOK makes it Ready


def test_the_runtime_stage_reads_the_annotation_and_only_finishes_pods_that_may_finish() -> None:
    stages = {d["metadata"]["name"]: d for d in
              yaml.safe_load_all((KWOK_STAGES / "pods.yaml").read_text())}
    assert set(stages) == {"muster-pod-running", "muster-pod-finish", "muster-pod-delete"}
    finish = stages["muster-pod-finish"]["spec"]
    assert RUNTIME_ANNOTATION in finish["delay"]["durationFrom"]["jq"]["expression"]
    keys = {e["key"]: e for e in finish["selector"]["matchExpressions"]}
    assert keys[f'.metadata.annotations["{RUNTIME_ANNOTATION}"]']["operator"] == "Exists"
    assert keys[".spec.restartPolicy"]["values"] == ["Never", "OnFailure"]
    assert "phase: Succeeded" in finish["next"]["statusTemplate"]
    delete = stages["muster-pod-delete"]["spec"]
    assert delete["next"]["delete"] is True
    assert SHUTDOWN_ANNOTATION in delete["delay"]["durationFrom"]["jq"]["expression"]
    assert delete["delay"]["durationMilliseconds"] > 0  # a controller sees it terminating


def _story() -> dict[str, object]:
    template = {"metadata": {"annotations": {RUNTIME_ANNOTATION: "90s"},
                             "labels": {"team": "a"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "i"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "template": template}}}]}}


def test_a_stand_in_job_carries_the_role_template_for_the_real_job_controller() -> None:
    obj = _story()
    descriptor = packaged_catalog().require(obj)
    jobs, pods = children(obj, resolve_workload(obj, descriptor), descriptor,
                          pods_by_caller=False)
    assert len(jobs) == 2 and len(pods) == 4
    for job in jobs:
        template = job["spec"]["template"]
        assert template["metadata"]["annotations"] == {RUNTIME_ANNOTATION: "90s"}
        assert template["metadata"]["labels"]["team"] == "a"
        assert "managedBy" not in job["spec"]  # the Job controller's to fill
        assert job["spec"]["selector"]["matchLabels"].items() <= \
            template["metadata"]["labels"].items()


def test_a_stand_in_job_whose_pods_the_caller_makes_is_left_alone_by_the_job_controller() -> None:
    obj = _story()
    descriptor = packaged_catalog().require(obj)
    jobs, _ = children(obj, resolve_workload(obj, descriptor), descriptor)
    assert {j["spec"]["managedBy"] for j in jobs} == {STAND_IN_MANAGER}


def test_a_stand_in_leaderworkerset_makes_no_statefulset_and_owns_its_pods() -> None:
    obj = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "serve", "namespace": "ns", "uid": "u"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
               "spec": {"containers": [{"name": "m", "image": "i"}]}}}}}
    descriptor = packaged_catalog().require(obj)
    made, pods = children(obj, resolve_workload(obj, descriptor), descriptor)
    assert made == [] and len(pods) == 4
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == \
        {"LeaderWorkerSet"}


def _release_webhooks(directory: Path, *, patched_name: str = "mpod.kb.io") -> None:
    """A release's webhook configuration (as LWS v0.7.0 ships it) and its kustomize patch."""
    (directory / "lws-webhooks.yaml").write_text(yaml.safe_dump_all([{
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            {"name": "mleaderworkerset.kb.io", "clientConfig": {"service": {
                "name": "webhook-service", "namespace": "system",
                "path": "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"}},
             "rules": [{"resources": ["leaderworkersets"]}]},
            {"name": "mpod.kb.io", "clientConfig": {"service": {
                "name": "webhook-service", "namespace": "system", "path": "/mutate--v1-pod"}},
             "rules": [{"operations": ["CREATE"], "resources": ["pods"]}]}]}]))
    (directory / "lws-webhooks-mutating-patch.yaml").write_text(yaml.safe_dump([{
        "op": "replace", "path": "/webhooks/1", "value": {
            "name": patched_name,
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": "/mutate--v1-pod"}},
            "objectSelector": {"matchExpressions": [
                {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]},
            "rules": [{"operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]}}]))
    (directory / "lws-webhooks-validating-patch.yaml").write_text("[]\n")


def test_operator_webhooks_are_patched_as_the_release_does_and_served_on_loopback_with_our_ca(
        tmp_path: Path) -> None:
    _release_webhooks(tmp_path)
    [config] = webhook_configurations(LWS, tmp_path, port=9443, ca=b"PEM")
    assert config["metadata"]["name"] == "lws-mutating-webhook-configuration"
    lws, pods = config["webhooks"]
    assert lws["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "caBundle": base64.b64encode(b"PEM").decode()}
    assert "objectSelector" not in lws
    # The release's patch: only LWS pods reach the pod webhook, on create and update.
    assert pods["objectSelector"]["matchExpressions"] == [
        {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
    assert pods["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert pods["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"


def test_a_release_patch_for_a_webhook_not_at_its_index_is_refused_naming_the_file(
        tmp_path: Path) -> None:
    _release_webhooks(tmp_path, patched_name="vpod.kb.io")
    with pytest.raises(SandboxError, match=r"lws-webhooks-mutating-patch\.yaml: operation 0: "
                                           r"no single configuration has webhook 'vpod\.kb\.io'"):
        webhook_configurations(LWS, tmp_path, port=9443, ca=b"PEM")


def test_an_operators_crds_are_labelled_as_its_own_so_no_stand_in_runs_beside_it(
        tmp_path: Path) -> None:
    (tmp_path / "lws-crd.yaml").write_text(yaml.safe_dump({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
        "spec": {"group": "leaderworkerset.x-k8s.io"}}))
    [crd] = crds(LWS, tmp_path)
    assert crd["metadata"]["labels"] == {OPERATOR_LABEL: "lws"}
    (tmp_path / "lws-crd.yaml").write_text("kind: ConfigMap\n---\nkind: ConfigMap\n")
    with pytest.raises(SandboxError, match=r"lws-crd\.yaml: expected one CustomResourceDefinition"):
        crds(LWS, tmp_path)


def test_a_real_operator_runs_without_leader_election_or_metrics_and_serves_on_loopback(
        tmp_path: Path) -> None:
    path = config_file(LWS, tmp_path, webhook_port=1, health_port=2, cert_dir=tmp_path / "c")
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == "config.lws.x-k8s.io/v1alpha1"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 1, "host": "127.0.0.1", "certDir": str(tmp_path / "c")}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:2"}
    assert config["metrics"] == {"bindAddress": "0"}


def test_the_sandbox_runs_only_the_real_operators_asked_for_each_on_its_own_ports() -> None:
    assert SandboxSpec().real_operators() == ()
    assert SandboxSpec(lws=True).real_operators() == (LWS,)
    assert SandboxSpec(jobset=True, lws=True, kuberay=True).real_operators() == \
        (JOBSET, LWS, KUBERAY)
    ports = Ports().resolved(free_ports)
    assert len({*ports.of("jobset"), *ports.of("lws"), ports.of("kuberay")[1]}) == 5
    assert ports.of("kuberay")[0] == 0  # its optional webhook stays off


def test_kuberay_takes_flags_no_leader_election_no_metrics_and_probes_on_loopback() -> None:
    command = argv(KUBERAY, Path("/bin"), kubeconfig=Path("/k"), config=None, health_port=7)
    assert command == ["/bin/kuberay", "--kubeconfig=/k", "--enable-leader-election=false",
                       "--metrics-addr=0", "--health-probe-bind-address=127.0.0.1:7",
                       "--log-stdout-encoder=console"]
    assert KUBERAY.webhooks_file is None and KUBERAY.config_api is None
    assert argv(LWS, Path("/bin"), kubeconfig=Path("/k"), config=Path("/c"), health_port=7) == \
        ["/bin/lws", "--config=/c", "--kubeconfig=/k"]


def test_sandbox_up_runs_every_real_operator_unless_one_is_left_out_by_name() -> None:
    def operators(*flags: str) -> tuple[object, ...]:
        return _spec(build_parser().parse_args(["sandbox", "up", "--dir", "/x", *flags])
                     ).real_operators()

    assert operators() == (JOBSET, LWS, KUBERAY, MPI_OPERATOR, TRAINER, KUEUE)
    assert operators("--lws") == (JOBSET, LWS, KUBERAY, MPI_OPERATOR, TRAINER, KUEUE)
    assert operators("--no-lws") == (JOBSET, KUBERAY, MPI_OPERATOR, TRAINER, KUEUE)
    assert operators("--no-jobset", "--no-lws", "--no-kuberay", "--no-mpi-operator",
                     "--no-kueue") == ()
    # Programs (the e2e suite, the demo, the benchmark) ask for them by name.
    assert SandboxSpec().real_operators() == ()


TRAININGRUN_DESCRIPTOR = """
apiVersion: muster.dev/v1alpha1
kind: WorkloadDescriptor
metadata: {name: trainingrun}
spec:
  target: {group: acme.example.com, kind: TrainingRun, versions: [v1], plural: trainingruns}
  roles:
    - name: worker
      replicas: {path: $.spec.workers}
      template: {podTemplate: $.spec.template}
  pods:
    workloadLabel: acme.example.com/run
"""
"""A kind of a team's own whose operator labels its pods with the run's name."""


def test_the_gate_webhook_is_the_shipped_one_on_loopback_for_the_sandboxs_schedulers() -> None:
    hook = gate_webhook(port=4443, ca=b"CA PEM")
    [shipped] = yaml.safe_load_all(
        (Path(__file__).resolve().parents[3] / "manifests" / "webhook.yaml").read_text())
    [entry] = hook["webhooks"]
    [original] = shipped["webhooks"]
    assert entry["clientConfig"] == {"url": "https://127.0.0.1:4443/admission/gate",
                                     "caBundle": base64.b64encode(b"CA PEM").decode()}
    assert {k: v for k, v in entry.items() if k not in ("clientConfig", "matchConditions")} \
        == {k: v for k, v in original.items() if k not in ("clientConfig", "matchConditions")}
    scheduler, may_join = entry["matchConditions"]
    assert scheduler["expression"] == "object.spec.schedulerName in ['default-scheduler', 'muster']"
    # The same pods as installed: the shipped condition is the packaged catalog's.
    assert may_join == original["matchConditions"][1]
    assert may_join["expression"] == may_join_a_gang(packaged_catalog())


def test_the_shipped_webhook_and_chart_ask_only_about_pods_the_packaged_catalog_may_gang(
        ) -> None:
    repo = Path(__file__).resolve().parents[3]
    expected = may_join_a_gang(packaged_catalog())
    assert expected is not None and expected.startswith("has(object.metadata.ownerReferences)")
    [shipped] = yaml.safe_load_all((repo / "manifests" / "webhook.yaml").read_text())
    [entry] = shipped["webhooks"]
    assert {c["name"]: c["expression"] for c in entry["matchConditions"]}["may-join-a-gang"] \
        == expected
    chart = (repo / "charts" / "muster" / "templates" / "_webhook.tpl").read_text()
    assert f'expression: "{expected}"' in chart


def test_a_sandbox_with_descriptors_of_its_own_asks_about_their_workload_labels(
        tmp_path: Path) -> None:
    extra = tmp_path / "trainingrun.yaml"
    extra.write_text(TRAININGRUN_DESCRIPTOR)
    hook = gate_webhook(port=4443, ca=b"CA PEM", descriptor_dirs=(str(tmp_path),))
    [entry] = hook["webhooks"]
    assert "'acme.example.com/run'" in entry["matchConditions"][1]["expression"]


def test_gating_is_on_in_sandbox_up_unless_turned_off() -> None:
    parser = build_parser()
    assert _spec(parser.parse_args(["sandbox", "up"])).gating is True
    assert _spec(parser.parse_args(["sandbox", "up", "--no-gating"])).gating is False


def test_sandbox_up_gates_by_the_policy_unless_the_webhook_is_asked_for() -> None:
    parser = build_parser()
    assert _spec(parser.parse_args(["sandbox", "up"])).gate_by is GateBy.POLICY
    assert _spec(parser.parse_args(["sandbox", "up", "--gate-by", "webhook"])).gate_by \
        is GateBy.WEBHOOK
    with pytest.raises(SystemExit):
        parser.parse_args(["sandbox", "up", "--gate-by", "cel"])


def _shipped_policy() -> list[dict[str, object]]:
    policy = Path(__file__).resolve().parents[3] / "manifests" / "gate-policy" / "gate-policy.yaml"
    return list(yaml.safe_load_all(policy.read_text()))


def test_the_gate_policy_is_the_shipped_one_for_the_sandboxs_schedulers() -> None:
    policy, binding = gate_policy()
    shipped_policy, shipped_binding = _shipped_policy()
    assert binding == shipped_binding
    assert binding["spec"] == {"policyName": policy["metadata"]["name"]}
    assert {k: v for k, v in policy["spec"].items() if k != "matchConditions"} \
        == {k: v for k, v in shipped_policy["spec"].items() if k != "matchConditions"}
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert conditions["muster-scheduler"] \
        == "object.spec.schedulerName in ['default-scheduler', 'muster']"
    assert conditions["may-join-a-gang"] == may_join_a_gang(packaged_catalog())
    assert conditions["unbound"] == "!has(object.spec.nodeName) || object.spec.nodeName == ''"


def test_the_shipped_policy_gates_the_pods_the_shipped_webhook_asks_about_and_only_unbound_ones(
        ) -> None:
    [policy, _binding] = _shipped_policy()
    [hook] = yaml.safe_load_all(
        (Path(__file__).resolve().parents[3] / "manifests" / "webhook.yaml").read_text())
    [entry] = hook["webhooks"]
    spec = policy["spec"]
    webhook_conditions = {c["name"]: c["expression"] for c in entry["matchConditions"]}
    policy_conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    # The webhook checks spec.nodeName itself; CEL must, or the API server refuses the pod.
    assert policy_conditions.pop("unbound")
    assert policy_conditions == webhook_conditions
    constraints = spec["matchConstraints"]
    assert constraints["resourceRules"] == entry["rules"]
    assert constraints["namespaceSelector"] == entry["namespaceSelector"]
    assert constraints["objectSelector"] == entry["objectSelector"]
    assert spec["failurePolicy"] == entry["failurePolicy"] == "Ignore"
    [mutation] = spec["mutations"]
    assert '{name: "muster.dev/gang"}' in mutation["applyConfiguration"]["expression"]


def test_a_catalog_whose_bare_pods_have_gangs_drops_the_policys_may_join_condition(
        tmp_path: Path) -> None:
    pod = (packaged_catalog_dir() / "pod.yaml").read_text()
    (tmp_path / "pod.yaml").write_text(pod.replace("policy: none", "policy: workload"))
    [policy, _binding] = gate_policy(descriptor_dirs=(str(tmp_path),))
    names = [c["name"] for c in policy["spec"]["matchConditions"]]
    assert names == ["muster-scheduler", "unbound"]
