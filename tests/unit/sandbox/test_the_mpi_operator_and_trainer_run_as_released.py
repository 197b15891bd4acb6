"""How the sandbox runs the MPI operator (v0.7.0) and Kubeflow Trainer (v2.1.0): what each
release reads (flags, its Configuration, where its certificates are), its ports, its CRDs
beside the other operators' and the objects it ships."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.cli.main import build_parser
from extender.cli.sandbox import _spec
from extender.sandbox.config import Ports
from extender.sandbox.local import SandboxError, clear_own, free_ports
from extender.sandbox.operators import (
    JOBSET,
    KUBERAY,
    KUEUE,
    LWS,
    MPI_OPERATOR,
    OPERATORS,
    TRAINER,
    argv,
    config_file,
    environment,
    loopback_ports,
    release_objects,
)
from extender.sandbox.provision import workload_crds
from extender.sandbox.spec import SandboxSpec


def crd(kind: str, plural: str, group: str, *, scope: str = "Namespaced") -> dict[str, object]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": scope,
                     "names": {"kind": kind, "plural": plural},
                     "versions": [{"name": "v2beta1", "served": True, "storage": True}]}}


def test_the_mpi_operator_takes_its_kubeconfig_as_its_go_flag_and_leases_in_kube_system(
) -> None:
    command = argv(MPI_OPERATOR, Path("/bin"), kubeconfig=Path("/k"), config=None,
                   health_port=8080)
    assert command == ["/bin/mpi-operator", "--kubeConfig=/k", "--lock-namespace=kube-system",
                       "--monitoring-port=0"]


def test_the_mpi_operator_is_probed_on_the_port_it_cannot_be_told_and_serves_no_webhook() -> None:
    ports = Ports().resolved(free_ports)
    assert loopback_ports(MPI_OPERATOR, ports, free_ports) == (0, 8080)
    assert MPI_OPERATOR.health_path == "/healthz"
    assert loopback_ports(JOBSET, ports, free_ports) == ports.of("jobset")


def test_trainer_gets_a_webhook_and_a_health_port_free_now_and_the_others_keep_theirs() -> None:
    webhook, health = loopback_ports(TRAINER, Ports(), lambda n: [5001, 5002][:n])
    assert {webhook, health} == {5001, 5002}
    assert loopback_ports(KUBERAY, Ports(kuberay_health=7), free_ports) == (0, 7)


def test_trainer_runs_without_leader_election_cert_rotation_or_metrics_reading_certs_from_tmpdir(
        tmp_path: Path) -> None:
    path = config_file(TRAINER, tmp_path, webhook_port=1, health_port=2, cert_dir=tmp_path / "c")
    config = yaml.safe_load(path.read_text())
    # Trainer decodes its Configuration strictly: only keys of its own schema.
    assert config == {"apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                      "kind": "Configuration", "leaderElection": {"leaderElect": False},
                      "certManagement": {"enable": False},
                      "webhook": {"port": 1, "host": "127.0.0.1"},
                      "health": {"healthProbeBindAddress": "127.0.0.1:2"},
                      "metrics": {"bindAddress": "0"}}
    certs = tmp_path / "webhook-certs"
    certs.mkdir()
    (certs / "tls.crt").write_text("cert")
    env = environment(TRAINER, tmp_path, cert_dir=certs)
    served = Path(env["TMPDIR"]) / "k8s-webhook-server" / "serving-certs" / "tls.crt"
    assert served.read_text() == "cert"  # controller-runtime's default certificate directory
    assert environment(TRAINER, tmp_path, cert_dir=certs) == env  # a restart reuses it
    assert environment(LWS, tmp_path, cert_dir=certs) == {}  # its certDir is in its config


def test_trainers_runtime_is_created_at_the_path_of_its_cluster_scoped_kind(tmp_path: Path) -> None:
    for name, kind, plural, scope in (
            ("trainer-crd-trainjobs.yaml", "TrainJob", "trainjobs", "Namespaced"),
            ("trainer-crd-trainingruntimes.yaml", "TrainingRuntime", "trainingruntimes",
             "Namespaced"),
            ("trainer-crd-clustertrainingruntimes.yaml", "ClusterTrainingRuntime",
             "clustertrainingruntimes", "Cluster")):
        (tmp_path / name).write_text(yaml.safe_dump(
            crd(kind, plural, "trainer.kubeflow.org", scope=scope)))
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-distributed"}, "spec": {}}
    (tmp_path / "trainer-runtime-torch-distributed.yaml").write_text(yaml.safe_dump(runtime))
    assert release_objects(TRAINER, tmp_path) == [
        ("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", runtime)]
    (tmp_path / "trainer-runtime-torch-distributed.yaml").write_text(yaml.safe_dump(
        {**runtime, "kind": "TrainingRuntime"}))
    with pytest.raises(SandboxError, match="TrainingRuntime is no cluster-scoped kind"):
        release_objects(TRAINER, tmp_path)


def test_the_mpi_operators_crd_replaces_only_mpijobs_not_the_other_kubeflow_org_kinds(
        tmp_path: Path) -> None:
    (tmp_path / "mpi-operator-crd.yaml").write_text(yaml.safe_dump(
        crd("MPIJob", "mpijobs", "kubeflow.org")))
    plain = {c["metadata"]["name"]: c for c in workload_crds(SandboxSpec(), tmp_path)}
    real = {c["metadata"]["name"]: c
            for c in workload_crds(SandboxSpec(mpi_operator=True), tmp_path)}
    assert real.keys() == plain.keys()
    assert "pytorchjobs.kubeflow.org" in real
    assert real["pytorchjobs.kubeflow.org"] == plain["pytorchjobs.kubeflow.org"]
    assert real["mpijobs.kubeflow.org"]["metadata"]["labels"] == {
        "muster.dev/sandbox-operator": "mpi-operator"}


def test_sandbox_up_runs_the_mpi_operator_and_trainer_unless_left_out_and_trainer_only_with_jobset(
) -> None:
    def operators(*flags: str) -> tuple[object, ...]:
        return _spec(build_parser().parse_args(["sandbox", "up", "--dir", "/x", *flags])
                     ).real_operators()

    assert operators() == (JOBSET, LWS, KUBERAY, MPI_OPERATOR, TRAINER, KUEUE)
    assert operators("--no-mpi-operator", "--no-trainer", "--no-kueue") == (JOBSET, LWS, KUBERAY)
    # Trainer's TrainJobs become JobSets: without the JobSet controller they get no pods.
    assert operators("--no-jobset", "--no-kueue") == (LWS, KUBERAY, MPI_OPERATOR)
    assert SandboxSpec(trainer=True, jobset=True).real_operators() == (JOBSET, TRAINER)


def test_up_clears_what_each_real_operator_wrote_in_the_sandbox_directory(tmp_path: Path) -> None:
    certs = tmp_path / "webhook-certs"
    certs.mkdir()
    for op in OPERATORS:
        (tmp_path / f"{op.name}.log").write_text("a previous run\n")
        if op.config_api is not None:
            config_file(op, tmp_path, webhook_port=1, health_port=2, cert_dir=certs)
        environment(op, tmp_path, cert_dir=certs)
    mine = tmp_path / "notes.txt"
    mine.write_text("kept")
    clear_own(tmp_path)
    assert list(tmp_path.iterdir()) == [mine]
