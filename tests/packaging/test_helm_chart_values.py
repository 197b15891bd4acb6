"""Each value of charts/muster changes exactly the fields it names, and nothing else; bad values
fail the render with the value's path, before anything reaches a cluster: types, names and
choices by values.schema.json, durations and their relation by the templates."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.packaging.helmchart import (
    CHART,
    CONFIG_CHECKSUM,
    MANIFESTS,
    NAMESPACE,
    SCHEDULER_CONFIG,
    Key,
    Objects,
    RenderFailed,
    Tools,
    changed,
    deployment,
    leaves,
)

EXTENDER: Key = ("Deployment", NAMESPACE, "muster")
SCHEDULER: Key = ("Deployment", NAMESPACE, "muster-scheduler")
CONFIG: Key = ("ConfigMap", NAMESPACE, "muster-scheduler-config")
POD = "spec.template.spec"
MUSTER = f"{POD}.containers[muster]"
KUBE_SCHEDULER = f"{POD}.containers[kube-scheduler]"
CHECKSUM = (SCHEDULER, f"spec.template.metadata.annotations.{CONFIG_CHECKSUM}")


@pytest.fixture(scope="module")
def defaults(tools: Tools) -> Objects:
    return tools.template()


def test_the_image_tag_changes_only_the_muster_containers_image(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "image.tag=0.2.0")
    assert changed(defaults, after) == {(EXTENDER, f"{MUSTER}.image")}
    assert deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["image"] \
        == "ghcr.io/muster-dev/muster:0.2.0"


def test_the_runbook_base_url_changes_only_every_alerts_runbook_url(tools: Tools) -> None:
    on = ("--set", "monitoring.prometheusRule.enabled=true")
    before = tools.template(*on)
    after = tools.template(*on, "--set",
                           "monitoring.prometheusRule.runbookBaseURL=https://wiki.example/muster")
    rule: Key = ("PrometheusRule", NAMESPACE, "muster")
    urls = {path: value for path, value in leaves(after[rule]) if path.endswith(".runbook_url")}
    assert len(urls) >= 9 and {(rule, path) for path in urls} == changed(before, after)
    old = dict(leaves(before[rule]))
    for path, url in urls.items():
        assert url == f"https://wiki.example/muster#{old[path].split('#')[1]}"


def test_without_a_tag_the_image_is_the_charts_app_version(defaults: Objects) -> None:
    image = deployment(defaults, "muster")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "ghcr.io/muster-dev/muster:0.1.0"


def test_the_bind_timeout_changes_only_muster_bind_timeout_and_leaves_kube_scheduler_alone(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "extender.bindTimeout=7s")
    assert changed(defaults, after) == {(EXTENDER, f"{MUSTER}.env[MUSTER_BIND_TIMEOUT].value")}
    env = deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MUSTER_BIND_TIMEOUT", "value": "7s"} in env


def test_scheduler_replicas_change_only_the_scheduler_deployments_replicas(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "scheduler.replicas=3")
    assert changed(defaults, after) == {(SCHEDULER, "spec.replicas")}
    assert deployment(after, "muster-scheduler")["spec"]["replicas"] == 3


@pytest.mark.parametrize(("flag", "env", "value"), [
    ("extender.planTTL=90s", "MUSTER_PLAN_TTL", "90s"),
    ("extender.scoring=spread", "MUSTER_SCORING", "spread"),
    ("extender.logLevel=debug", "MUSTER_LOG_LEVEL", "debug"),
    ("extender.threads=256", "MUSTER_THREADS", "256"),
])
def test_each_extender_setting_is_exactly_its_muster_variable(
        tools: Tools, defaults: Objects, flag: str, env: str, value: str) -> None:
    after = tools.template("--set", flag)
    assert changed(defaults, after) == {(EXTENDER, f"{MUSTER}.env[{env}].value")}
    assert {"name": env, "value": value} in \
        deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]


@pytest.mark.parametrize(("flag", "key", "container"), [
    ("image.pullPolicy=Always", EXTENDER, MUSTER),
    ("scheduler.image.pullPolicy=Always", SCHEDULER, KUBE_SCHEDULER),
])
def test_a_pull_policy_is_set_only_on_its_own_container(
        tools: Tools, defaults: Objects, flag: str, key: Key, container: str) -> None:
    assert changed(defaults, tools.template("--set", flag)) == {
        (key, f"{container}.imagePullPolicy")}


def test_the_kube_scheduler_tag_changes_its_image_and_nothing_of_muster(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "scheduler.image.tag=v1.37.2")
    assert changed(defaults, after) == {(SCHEDULER, f"{KUBE_SCHEDULER}.image")}


def test_the_extender_port_moves_the_url_the_service_the_policy_and_the_container_together(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "extender.port=9443")
    config = yaml.safe_load(after[CONFIG]["data"][SCHEDULER_CONFIG])
    assert config["extenders"][0]["urlPrefix"] == "https://muster.muster-system.svc:9443"
    assert {key[0] for key, _ in changed(defaults, after)} == {
        "ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    assert (SCHEDULER, f"spec.template.metadata.annotations.{CONFIG_CHECKSUM}") in \
        changed(defaults, after)  # kube-scheduler rolls to read the new URL


def test_a_scheduler_configuration_change_rolls_kube_scheduler_through_its_checksum(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "scheduler.httpTimeout=20s")
    assert changed(defaults, after) == {(CONFIG, f"data.{SCHEDULER_CONFIG}"), CHECKSUM}
    assert yaml.safe_load(after[CONFIG]["data"][SCHEDULER_CONFIG])["extenders"][0][
        "httpTimeout"] == "20s"


def test_without_bind_verb_kube_scheduler_binds_and_the_timeout_check_is_moot(
        tools: Tools) -> None:
    after = tools.template("--set", "scheduler.bindVerb=false",
                           "--set", "extender.bindTimeout=30s")
    assert "bindVerb" not in yaml.safe_load(after[CONFIG]["data"][SCHEDULER_CONFIG])["extenders"][0]


def test_placement_values_land_in_their_own_pod_spec_only(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template(
        "--set", "extender.nodeSelector.pool=system",
        "--set", "extender.tolerations[0].key=dedicated",
        "--set", "extender.tolerations[0].operator=Exists",
        "--set", "scheduler.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                 "[0].weight=1",
        "--set", "scheduler.resources.limits.memory=1Gi")
    paths = changed(defaults, after)
    assert {key for key, _ in paths} == {EXTENDER, SCHEDULER}
    assert (EXTENDER, f"{POD}.nodeSelector.pool") in paths
    assert (EXTENDER, f"{POD}.tolerations[0].key") in paths
    assert (SCHEDULER, f"{KUBE_SCHEDULER}.resources.limits.memory") in paths
    assert all(p.startswith(f"{POD}.") for key, p in paths if key == EXTENDER)
    assert all(p.startswith(f"{POD}.") for key, p in paths if key == SCHEDULER)


def test_common_labels_reach_every_templated_object_but_never_a_selector(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "commonLabels.team=ml-platform")
    paths = changed(defaults, after)
    # The CRDs are in crds/, which Helm applies as they are, never as templates.
    crds = {("CustomResourceDefinition", None, "workloaddescriptors.muster.dev"),
            ("CustomResourceDefinition", None, "gangs.muster.dev")}
    assert {key for key, _ in paths} == set(defaults) - crds
    assert {p for _, p in paths} == {"metadata.labels.team"}


def test_the_disruption_budgets_select_exactly_each_deployments_pods(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "podDisruptionBudget.enabled=false")
    budgets = {key: defaults[key] for key, _ in changed(after, defaults)}
    assert set(budgets) == {("PodDisruptionBudget", NAMESPACE, "muster"),
                            ("PodDisruptionBudget", NAMESPACE, "muster-scheduler")}
    for (_, _, name), pdb in budgets.items():
        assert pdb["spec"]["selector"] == deployment(defaults, name)["spec"]["selector"]
        assert pdb["spec"]["minAvailable"] == 1
        assert deployment(defaults, name)["spec"]["replicas"] == 2


def test_without_leader_election_the_extender_is_one_recreated_replica_and_no_lease(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "extender.leaderElect=false", "--set", "extender.replicas=1")
    muster = deployment(after, "muster")
    assert muster["spec"]["strategy"] == {"type": "Recreate"}
    names = {e["name"] for e in muster["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not names & {"MUSTER_LEADER_ELECT", "MUSTER_LEASE_NAME", "MUSTER_LEASE_NAMESPACE"}
    # The lease Role stays (rbac is not tied to the flag) but names the default Lease.
    key = ("Role", NAMESPACE, "muster-extender-leader-election")
    assert after[key] == defaults[key]


def test_a_lease_name_reaches_the_flag_and_the_role_together(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "extender.leaseName=muster-gpu")
    env = deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MUSTER_LEASE_NAME", "value": "muster-gpu"} in env
    role = after[("Role", NAMESPACE, "muster-extender-leader-election")]
    assert role["rules"][0]["resourceNames"] == ["muster-gpu"]


def test_without_rbac_the_chart_makes_no_identity_and_no_grant(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "rbac.create=false")
    removed = set(defaults) - set(after)
    assert {kind for kind, _, _ in removed} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert changed(defaults, after) == {(key, "") for key in removed}


SERVES_THE_POLICY = ("--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
"""What discovery lists on a cluster of 1.36 or later; helm template's own list lacks it."""


def sets(*flags: str) -> list[str]:
    return [arg for flag in flags for arg in ("--set", flag)]


@pytest.mark.parametrize("flags", [
    pytest.param((), id="auto-where-the-cluster-serves-it"),
    pytest.param(("gating=policy",), id="gating-policy"),
    pytest.param(("webhook.enabled=false", "gatePolicy.enabled=true"), id="older-switches"),
])
def test_the_gate_policy_replaces_the_webhook_and_is_the_manifests_one(
        tools: Tools, defaults: Objects, flags: tuple[str, ...]) -> None:
    after = tools.template(*sets(*flags), *SERVES_THE_POLICY)
    added = {k: v for k, v in after.items() if k not in defaults}
    removed = {k for k in defaults if k not in after}
    assert removed == {("MutatingWebhookConfiguration", None, "muster-gate")}
    assert added == tools.kustomize(MANIFESTS / "gate-policy")
    # Muster serves no webhook then: its variables, port and Service port are gone, and the
    # NetworkPolicy no longer opens the port; nothing else of the chart changed.
    assert {key for key, _ in changed(defaults, after)} - removed - set(added) == {
        EXTENDER, ("Service", NAMESPACE, "muster"), ("NetworkPolicy", NAMESPACE, "muster")}
    env = deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not [e for e in env if e["name"].startswith("MUSTER_WEBHOOK")]
    elsewhere = tools.template(*sets(*flags), *SERVES_THE_POLICY, namespace="ml-infra")
    [selector, _off] = elsewhere[("MutatingAdmissionPolicy", None, "muster-gate")][
        "spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert selector["values"] == ["kube-system", "ml-infra"]


@pytest.mark.parametrize("flags", [
    pytest.param(("gating=webhook",), id="gating-webhook"),
    pytest.param(("webhook.enabled=true",), id="older-switch"),
    pytest.param(("gatePolicy.enabled=false",), id="older-policy-switch-off"),
    # helm upgrade --reuse-values from an older chart: its defaults, and no gating key at all.
    pytest.param(("gating=null", "webhook.enabled=true", "gatePolicy.enabled=false"),
                 id="reused-values-of-an-older-chart"),
])
def test_the_webhook_stays_where_chosen_on_a_cluster_that_serves_the_policy(
        tools: Tools, defaults: Objects, flags: tuple[str, ...]) -> None:
    assert changed(defaults, tools.template(*sets(*flags), *SERVES_THE_POLICY)) == set()


def test_gating_off_installs_neither_gate_and_serves_no_webhook(
        tools: Tools, defaults: Objects) -> None:
    for after in (tools.template("--set", "gating=off", *SERVES_THE_POLICY),
                  tools.template("--set", "webhook.enabled=false")):
        removed = {k for k in defaults if k not in after}
        assert removed == {("MutatingWebhookConfiguration", None, "muster-gate")}
        assert not [k for k in after if k not in defaults]
        env = deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]
        assert not [e for e in env if e["name"].startswith("MUSTER_WEBHOOK")]


def test_monitoring_objects_are_off_unless_asked_one_by_one(
        tools: Tools, defaults: Objects) -> None:
    after = tools.template("--set", "monitoring.serviceMonitor.enabled=true",
                           "--set", "monitoring.serviceMonitor.labels.release=prometheus")
    assert {key for key, _ in changed(defaults, after)} == {("ServiceMonitor", NAMESPACE, "muster")}
    assert after[("ServiceMonitor", NAMESPACE, "muster")]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "muster", "release": "prometheus"}


@pytest.mark.parametrize(("flags", "named"), [
    (("extender.planTTL=soon",), "extender.planTTL is \"soon\", not a duration"),
    (("extender.bindTimeout=5 s",), "extender.bindTimeout is \"5 s\", not a duration"),
    (("scheduler.httpTimeout=10",), "at '/scheduler/httpTimeout': got number, want string"),
    (("extender.bindTimeout=10s",), "scheduler.httpTimeout (10s) must exceed "
                                    "extender.bindTimeout (10s)"),
    (("extender.bindTimeout=1m", "scheduler.httpTimeout=59s500ms"),
     "scheduler.httpTimeout (59s500ms) must exceed extender.bindTimeout (1m)"),
    (("tls.mode=auto",), "at '/tls/mode': value must be one of 'existing', 'generate'"),
    (("extender.bindtimeout=3s",), "at '/extender': additional properties 'bindtimeout'"),
    (("scheduler.replicas=two",), "at '/scheduler/replicas': got string, want integer"),
    (("extender.logLevel=verbose",), "at '/extender/logLevel': value must be one of"),
    (("extender.leaderElect=false",), "extender.replicas above 1 needs "
                                      "extender.leaderElect"),
    (("gatePolicy.enabled=true",), "gatePolicy.enabled and webhook.enabled"),
    (("gating=webhook", "webhook.enabled=false"),
     'gating is "webhook" and webhook.enabled or gatePolicy.enabled is set'),
    (("gating=sometimes",), "at '/gating': value must be one of 'auto', 'webhook'"),
])
def test_bad_values_fail_the_render_naming_the_value(
        tools: Tools, flags: tuple[str, ...], named: str) -> None:
    with pytest.raises(RenderFailed) as failed:
        tools.template(*[arg for flag in flags for arg in ("--set", flag)])
    assert named in failed.value.stderr
    assert "panic" not in failed.value.stderr


def test_a_bare_number_of_seconds_is_a_bind_timeout_as_muster_takes_it(tools: Tools) -> None:
    after = tools.template("--set-string", "extender.bindTimeout=3")
    assert {"name": "MUSTER_BIND_TIMEOUT", "value": "3"} in \
        deployment(after, "muster")["spec"]["template"]["spec"]["containers"][0]["env"]


def install_notes(tools: Tools, *flags: str) -> str:
    """What ``helm install`` prints after the objects (a dry run, no cluster)."""
    out = tools.run(str(tools.helm), "install", "muster", str(CHART), "-n", NAMESPACE,
                    "--dry-run=client", *flags)
    return out.split("NOTES:", 1)[1]


def test_install_warns_when_kube_schedulers_minor_is_not_the_clusters(tools: Tools) -> None:
    warned = re.search(r"scheduler.image.tag is v1\.33\.4 but the cluster is (v1\.\d+)\.\d+",
                       install_notes(tools))
    assert warned, "the default tag is older than the Kubernetes helm assumes without a cluster"
    assert "WARNING" not in install_notes(tools, "--set", f"scheduler.image.tag={warned[1]}.9",
                                          "--set", "image.repository=registry.example/muster")


def test_install_warns_while_the_image_is_the_placeholder(tools: Tools) -> None:
    warning = "WARNING: image.repository is the placeholder ghcr.io/muster-dev/muster"
    assert warning in install_notes(tools)
    assert warning not in install_notes(tools, "--set", "image.repository=registry.example/muster")


def test_install_says_how_to_reach_the_leader(tools: Tools) -> None:
    notes = install_notes(tools)
    assert ("get lease muster -o jsonpath='{.spec.holderIdentity}' | cut -d_ -f1)" in notes
            and 'logs "$leader"' in notes and 'port-forward "pod/$leader" 8889' in notes)
    single = install_notes(tools, "--set", "extender.leaderElect=false",
                           "--set", "extender.replicas=1")
    assert "lease" not in single and "port-forward svc/muster 8889" in single


def test_install_says_which_gate_it_chose(tools: Tools) -> None:
    assert "Scheduling gates: Muster's admission webhook muster-gate." in install_notes(tools)
    assert "Scheduling gates: the MutatingAdmissionPolicy muster-gate;" in install_notes(
        tools, "--set", "gating=policy")
    assert "Scheduling gates: off;" in install_notes(tools, "--set", "gating=off")
