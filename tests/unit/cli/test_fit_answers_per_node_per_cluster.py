"""``muster fit``: whether every gang of a workload can be placed now, per cluster, per node."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.cli.helpers import DATA, EXAMPLES, dead_kubeconfig, muster
from tests.unit.cli.snapshots import node, pod, write

STORY = DATA / "story-jobset.yaml"


def _cluster(data: dict, name: str) -> dict:
    return next(c for c in data["clusters"] if c["name"] == name)


def test_fragmented_free_gpus_summed_would_fit_but_no_node_holds_a_pod(capsys, tmp_path: Path):
    # 4 nodes x 8 GPUs, 5 used on each: 12 free in total (the story needs 12), 3 per node.
    frag = write(tmp_path / "frag.yaml", *(node(f"n{i}") for i in range(4)),
                 *(pod(f"busy-{i}", f"n{i}", gpus=5) for i in range(4)))
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", frag, "-o", "json")
    assert ran.code == 1
    cluster = _cluster(ran.json(), str(frag))
    assert cluster["fits"] is False
    (gang,) = cluster["gangs"]
    assert (gang["name"], gang["minMember"], gang["placed"], gang["plan"]) == (
        "ml/story", 3, 0, {})
    assert "needs 4 nvidia.com/gpu on one node, the largest free is 3" in gang["reason"]
    # The pods holding the GPUs are named, by name when no controller owns them.
    assert gang["reason"].endswith("; held by others/busy-0 (5 GPUs on n0), others/busy-1 (5 on "
                                   "n1), others/busy-2 (5 on n2) and 1 more")


def test_a_roomy_cluster_gets_a_plan_of_pods_per_node_and_role(capsys, tmp_path: Path):
    roomy = write(tmp_path / "roomy.yaml", node("n0"), node("n1"))
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", roomy, "-o", "json")
    assert ran.code == 0
    (gang,) = _cluster(ran.json(), str(roomy))["gangs"]
    assert gang["placed"] == 3 and gang["fits"] is True
    assert sum(gang["plan"].values()) == 3
    assert all(n <= 2 for n in gang["plan"].values())  # 8 GPUs per node hold 2 pods of 4
    roles: dict[str, int] = {}
    for per_role in gang["planByRole"].values():
        for role, n in per_role.items():
            roles[role] = roles.get(role, 0) + n
    assert roles == {"leader": 1, "workers": 2}


def test_taints_not_gpus_are_the_limit(capsys, tmp_path: Path):
    # 24 GPUs free, but two of three nodes carry a taint the story does not tolerate: only n2
    # (2 pods of 4 GPUs) is eligible.
    tainted = write(tmp_path / "tainted.yaml", node("n0", taint="reserved"),
                    node("n1", taint="reserved"), node("n2"))
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", tainted, "-o", "json")
    assert ran.code == 1
    (gang,) = _cluster(ran.json(), str(tainted))["gangs"]
    assert (gang["fits"], gang["placed"]) == (False, 2)
    story = yaml.safe_load(STORY.read_text())
    for job in story["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"]["spec"]["tolerations"] = [
            {"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}]
    tolerant = tmp_path / "tolerant.yaml"
    tolerant.write_text(yaml.safe_dump(story))
    assert muster(capsys, "fit", "-f", tolerant, "--snapshot", tainted).code == 0


def test_cpu_not_gpus_is_the_limit(capsys, tmp_path: Path):
    # Plenty of GPUs, but each node has 10 CPUs and every story pod asks for 8.
    small = write(tmp_path / "cpu.yaml", node("n0", cpu="10"), node("n1", cpu="10"))
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", small, "-o", "json")
    assert ran.code == 1
    (gang,) = _cluster(ran.json(), str(small))["gangs"]
    assert "cpu" in gang["reason"] and gang["placed"] == 2


def test_gangs_of_one_workload_compete_in_order(capsys, tmp_path: Path):
    # LWS tensorrt with 2 groups: each group is a gang of 2 pods x 8 GPUs. Three 8-GPU nodes
    # hold the first group only; the second sees what the first took.
    docs = yaml.safe_load_all((EXAMPLES / "lws/lws__docs__examples__tensorrt-llm__lws.yaml")
                              .read_text())
    lws = next(d for d in docs if d and d.get("kind") == "LeaderWorkerSet")
    lws["spec"]["replicas"] = 2
    workload = tmp_path / "lws.yaml"
    workload.write_text(yaml.safe_dump(lws))
    three = write(tmp_path / "three.yaml", node("n0"), node("n1"), node("n2"))
    ran = muster(capsys, "fit", "-f", workload, "--snapshot", three, "-o", "json")
    assert ran.code == 1
    first, second = _cluster(ran.json(), str(three))["gangs"]
    assert (first["name"], first["fits"], first["placed"]) == (
        "default/tensorrt/group-0", True, 2)
    assert (second["name"], second["fits"]) == ("default/tensorrt/group-1", False)
    assert not set(first["plan"]) & set(second["plan"])
    four = write(tmp_path / "four.yaml", *(node(f"n{i}") for i in range(4)))
    assert muster(capsys, "fit", "-f", workload, "--snapshot", four).code == 0


def test_exit_0_when_any_cluster_fits_and_the_table_names_each(capsys, tmp_path: Path):
    frag = write(tmp_path / "frag.yaml", node("n0", gpus=3), node("n1", gpus=3))
    roomy = write(tmp_path / "roomy.yaml", node("big", gpus=16))
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", frag, "--snapshot", roomy)
    assert ran.code == 0
    rows = {line.split()[0]: line.split()[1] for line in ran.out.splitlines()
            if line.startswith(str(tmp_path))}
    assert rows == {str(frag): "no", str(roomy): "yes"}
    assert "big: leader 1, workers 2" in ran.out


def test_finished_pods_hold_nothing(capsys, tmp_path: Path):
    done = write(tmp_path / "done.yaml", node("n0", gpus=12),
                 pod("old", "n0", gpus=8, phase="Succeeded"))
    assert muster(capsys, "fit", "-f", STORY, "--snapshot", done).code == 0


def test_unreachable_context_is_reported_and_exits_2_when_nothing_fits(capsys, tmp_path: Path):
    kubeconfig = dead_kubeconfig(tmp_path)
    ran = muster(capsys, "fit", "-f", STORY, "--kubeconfig", kubeconfig, "--context", "dead",
                 "--request-timeout", "2", "-o", "json")
    assert ran.code == 2
    (cluster,) = ran.json()["clusters"]
    assert cluster["fits"] is False and "127.0.0.1:9" in cluster["reason"]
    roomy = write(tmp_path / "roomy.yaml", node("big", gpus=16))
    mixed = muster(capsys, "fit", "-f", STORY, "--kubeconfig", kubeconfig, "--context", "dead",
                   "--snapshot", roomy)
    assert mixed.code == 0


def test_fit_needs_one_workload_and_nodes(capsys, tmp_path: Path):
    two = tmp_path / "two.yaml"
    two.write_text(STORY.read_text() + "\n---\n" + STORY.read_text().replace(
        "name: story", "name: other"))
    roomy = write(tmp_path / "roomy.yaml", node("n0"))
    ran = muster(capsys, "fit", "-f", two, "--snapshot", roomy)
    assert ran.code == 2 and "holds 2 workloads" in ran.err
    empty = write(tmp_path / "empty.yaml")
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", empty)
    assert ran.code == 2 and "no Node objects" in ran.err

