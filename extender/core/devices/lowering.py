"""DRA lowered into resources: each node's free devices, each pod's device demand.

Every capacity check in Muster works on :class:`~extender.core.model.resources.Resources`. A
:class:`DeviceView` turns DRA into that currency:

* **supply** (per node): for every signature (a class, or a class with a request's selectors),
  how many of its devices the node can still give, after the devices that ResourceClaims have
  allocated (``status.allocation``, the allocator's truth) and the counters those use; plus,
  for each extended resource a DeviceClass serves (``extendedResourceName``), the class's free
  devices on nodes whose allocatable lacks that resource, as kube-scheduler serves it there;
* **demand** (per pod): the devices of its claims not yet allocated, and of those allocated
  and reserved for it alone, charged as :mod:`~extender.core.devices.matching` says: such a
  pod holds its devices as a device plugin's pod holds its GPUs, so they go back when it goes
  (a preemption frees them; the cluster emptied of pods has them all). A claim allocated and
  reserved for no living pod, or for several, is in the supply's numbers instead: a pod whose
  bind failed (kube-scheduler leaves its claim allocated, unreserved) and a shared claim are
  each counted once.

A pod's extended-resource request (``nvidia.com/gpu: 8`` served by DRA) stays in its container
requests; the hidden claim kube-scheduler allocates for it is therefore not subtracted again
while its pod exists. What cannot be counted (a missing class or claim, a selector that does not
evaluate, ``allocationMode: All`` matching no device) becomes a demand no node supplies, named
by the problem, so the gang waits saying why.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.devices.counters import consumed_by, free_count
from extender.core.devices.inventory import Device, Inventory, build_inventory
from extender.core.devices.matching import (
    Matches,
    Signature,
    attribute_value,
    match_devices,
    resource_name,
    wanted_signatures,
)
from extender.core.devices.requests import (
    ClaimSpec,
    DeviceClassInfo,
    DeviceRequest,
    extended_classes,
    read_claim_spec,
    read_classes,
)
from extender.core.model.objects import as_mapping, object_key
from extender.core.model.quantity import MILLI
from extender.core.model.resources import DEVICE_CLASS_PREFIX, UNCOUNTABLE_PREFIX

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DEFAULT_NAMESPACE = "default"
"""The namespace of a claim, template or pod that names none (one from a file), as the API
server would give it."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def _key(obj: Mapping[str, Any]) -> str:
    """A claim's or template's key, ``namespace/name``, as a pod's claims name it."""
    return object_key(obj, default_namespace=DEFAULT_NAMESPACE)


@dataclass(frozen=True)
class DeviceCatalog:
    """Slices and classes, matched against the signatures of every claim and template (the
    part that evaluates CEL; rebuilt only when one of those changes)."""

    inventory: Inventory
    classes: Mapping[str, DeviceClassInfo]
    matches: Matches
    extended: Mapping[str, DeviceClassInfo]
    """Extended resource name (explicit or implicit) -> the class serving it."""
    wanted: frozenset[Signature] = frozenset()
    """The signatures matched: those asked, and every class's own."""

    @functools.cached_property
    def devices_by_id(self) -> dict[str, Device]:
        return self.inventory.by_id()

    @classmethod
    def build(cls, slices: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]],
              signatures: Iterable[Signature]) -> DeviceCatalog:
        return cls._matched(build_inventory(slices), read_classes(classes), signatures, None)

    @classmethod
    def _matched(cls, inventory: Inventory, known: Mapping[str, DeviceClassInfo],
                 signatures: Iterable[Signature], previous: Matches | None) -> DeviceCatalog:
        wanted = wanted_signatures(known, signatures)
        return cls(inventory=inventory, classes=known,
                   matches=match_devices(inventory, known, wanted, previous=previous),
                   extended=extended_classes(known), wanted=wanted)

    @functools.cached_property
    def largest_node_counts(self) -> dict[Signature, int]:
        """Per signature, the most devices it matches on one node: what ``allocationMode:
        All`` takes there. Counted as that many everywhere, so an All pod fits only a node
        whose every matching device is free and whose count is the largest (a node with fewer
        is left unused: never promised more than it has)."""
        return {signature: max((len(d) for d in nodes.values()), default=0)
                for signature, nodes in self.matches.devices.items()}

    def covers(self, signatures: Iterable[Signature]) -> bool:
        """Whether every one of ``signatures`` is matched already."""
        return frozenset(signatures) <= self.wanted

    def with_signatures(self, signatures: Iterable[Signature]) -> DeviceCatalog:
        """The same slices and classes matched against ``signatures``: a signature matched
        already keeps its devices (no CEL evaluated again), a new one is matched."""
        return self._matched(self.inventory, self.classes, signatures, self.matches)


def signatures_of(claims: Iterable[Mapping[str, Any]],
                  templates: Iterable[Mapping[str, Any]]) -> frozenset[Signature]:
    """Every request signature of unallocated claims and of templates."""
    out: set[Signature] = set()
    for obj in claims:
        if not _allocation(obj):
            out.update(s for r in _spec(obj, "spec").requests for s in r.signatures)
    for obj in templates:
        out.update(s for r in _spec(as_mapping(obj.get("spec")), "spec").requests
                   for s in r.signatures)
    return frozenset(out)


def _spec(obj: Mapping[str, Any], field_name: str) -> ClaimSpec:
    return read_claim_spec(as_mapping(obj.get(field_name)), "")


def _allocation(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(as_mapping(claim.get("status")).get("allocation"))


@dataclass(frozen=True)
class DeviceView:
    """Free devices per node and the lookups a pod's demand needs."""

    catalog: DeviceCatalog
    free: Mapping[str, Mapping[str, int]]
    """Node -> resource -> free devices (whole units)."""
    claims: Mapping[str, Mapping[str, Any]]
    templates: Mapping[str, Mapping[str, Any]]
    problems: tuple[str, ...] = ()
    _specs: dict[str, ClaimSpec] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, catalog: DeviceCatalog, *, claims: Iterable[Mapping[str, Any]],
              templates: Iterable[Mapping[str, Any]], live_pods: frozenset[str],
              previous: DeviceView | None = None, only: Collection[str] | None = None,
              ) -> DeviceView:
        """``live_pods``: UIDs of the pods that exist (their extended-resource claims are
        counted through their requests, not again here). With ``previous`` (over the same
        catalog) and ``only``, the free counts of other nodes are kept from ``previous``."""
        by_key = {_key(c): c for c in claims}
        used = _used(by_key.values(), live_pods)
        consumed = consumed_by(catalog.devices_by_id, used)
        partial = previous is not None and only is not None and previous.catalog is catalog
        free: dict[str, dict[str, int]] = {}
        if partial:
            assert previous is not None and only is not None
            free = {n: dict(a) for n, a in previous.free.items() if n not in only}
        for signature, nodes in catalog.matches.devices.items():
            name = resource_name(signature)
            for node in (only if partial and only is not None else nodes):
                devices = nodes.get(node)
                if not devices:
                    continue
                count = max(free_count(group, used, consumed, catalog.inventory)
                            for group in _groups(devices, signature[2]))
                if count:
                    free.setdefault(node, {})[name] = count
        for resource, info in catalog.extended.items():
            if resource.startswith(DEVICE_CLASS_PREFIX):
                continue
            base = resource_name((info.name, (), ""))
            for node, amounts in free.items():
                if base in amounts and (not partial or only is None or node in only):
                    amounts[resource] = amounts[base]
        return cls(catalog=catalog, free=free, claims=by_key,
                   templates={_key(t): t for t in templates},
                   problems=catalog.inventory.problems)

    def node_supply(self, node: str, allocatable: Mapping[str, object]) -> dict[str, int]:
        """Resources (milli-units) DRA adds to ``node``'s allocatable. An explicit extended
        resource is added only where the node's allocatable lacks it (there the device plugin
        serves it, as kube-scheduler decides)."""
        served = {k for k, v in allocatable.items() if v not in (0, "0", None, "")}
        return {name: count * MILLI for name, count in self.free.get(node, {}).items()
                if name not in served}

    def pod_demand(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """Resources (milli-units) the pod's claims ask, beyond its containers': those not
        allocated yet, and those allocated and reserved for this pod alone (counted through
        the pod, as a device plugin's GPUs are: they go back when the pod goes)."""
        meta = _meta(pod)
        statuses = claim_statuses(pod)
        namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
        return self.spec_demand(namespace, as_mapping(pod.get("spec")), statuses=statuses,
                                who=f"pod {namespace}/{meta.get('name')}",
                                pod_uid=str(meta.get("uid") or ""))

    def spec_demand(self, namespace: str, spec: Mapping[str, Any], *,
                    statuses: Mapping[str, object] | None = None, who: str = "pod template",
                    pod_uid: str = "") -> dict[str, int]:
        """The same for a PodSpec in ``namespace`` (a workload's pod template: its claims
        come from their templates, no pod having any yet)."""
        entries = spec.get("resourceClaims")
        if not isinstance(entries, list) or not entries:
            return {}
        out: dict[str, int] = {}
        for index, raw in enumerate(entries[:MAX_POD_CLAIMS]):
            entry = as_mapping(raw)
            where = f"{who}: spec.resourceClaims[{index}]"
            claim_spec = self._claim_of(namespace, entry, statuses or {}, where, pod_uid)
            if isinstance(claim_spec, str):
                out[(UNCOUNTABLE_PREFIX + claim_spec)[:_NAME_MAX]] = MILLI
                continue
            for request in claim_spec.requests:
                self._charge(self._first_published(request), out)
        return out

    def _claim_of(self, namespace: str, entry: Mapping[str, Any],
                  statuses: Mapping[str, object], where: str,
                  pod_uid: str) -> ClaimSpec | str:
        name = entry.get("resourceClaimName")
        template = entry.get("resourceClaimTemplateName")
        if isinstance(name, str) and name:
            claim = self._existing(namespace, entry, statuses)
            if claim is None:
                return f"ResourceClaim {namespace}/{name} does not exist"
            return self._unallocated(claim, f"ResourceClaim {namespace}/{name}", pod_uid)
        if isinstance(template, str) and template:
            claim = self._existing(namespace, entry, statuses)
            if claim is not None:
                return self._unallocated(claim, f"ResourceClaim {_key(claim)}", pod_uid)
            found = self.templates.get(f"{namespace}/{template}")
            if found is None:
                return f"ResourceClaimTemplate {namespace}/{template} does not exist"
            return self._read(f"template {namespace}/{template}",
                              as_mapping(as_mapping(found.get("spec")).get("spec")),
                              f"ResourceClaimTemplate {namespace}/{template}")
        return f"{where}: neither resourceClaimName nor resourceClaimTemplateName is set"

    def _existing(self, namespace: str, entry: Mapping[str, Any],
                  statuses: Mapping[str, object]) -> Mapping[str, Any] | None:
        """The ResourceClaim a pod's ``spec.resourceClaims`` entry names, once it exists (a
        template's claim is found through the pod's ``status.resourceClaimStatuses``)."""
        name = entry.get("resourceClaimName")
        if not (isinstance(name, str) and name):
            name = statuses.get(str(entry.get("name")))
        return self.claims.get(f"{namespace}/{name}") if isinstance(name, str) and name else None

    def pod_node_terms(self, pod: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...], ...]:
        """For each of the pod's claims already allocated to node-local devices, the
        ``nodeSelectorTerms`` of its ``status.allocation.nodeSelector``: kube-scheduler's
        DynamicResources plugin lets the pod onto those nodes only (a claim left allocated by
        a failed bind pins its pod's retry to that node until kube-scheduler deallocates it),
        so a plan must put the pod there too."""
        spec = as_mapping(pod.get("spec"))
        entries = spec.get("resourceClaims")
        if not isinstance(entries, list) or not entries:
            return ()
        meta = _meta(pod)
        namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
        statuses = claim_statuses(pod)
        out = []
        for raw in entries[:MAX_POD_CLAIMS]:
            claim = self._existing(namespace, as_mapping(raw), statuses)
            selector = as_mapping(_allocation(claim).get("nodeSelector")) if claim else {}
            terms = selector.get("nodeSelectorTerms")
            if isinstance(terms, list) and terms:
                out.append(tuple(as_mapping(t) for t in terms[:_MAX_TERMS]))
        return tuple(out)

    def _unallocated(self, claim: Mapping[str, Any], where: str,
                     pod_uid: str) -> ClaimSpec | str:
        if _allocation(claim) and not (pod_uid and _reserved_for(claim) == pod_uid):
            return ClaimSpec()  # its devices are out of the supply already
        return self._read(f"claim {_key(claim)}", as_mapping(claim.get("spec")), where)

    def _read(self, key: str, spec: Mapping[str, Any], where: str) -> ClaimSpec | str:
        found = self._specs.get(key)
        if found is None:
            found = read_claim_spec(spec, where)
            if len(self._specs) < _SPEC_CACHE:
                self._specs[key] = found
        return found.problem or found

    def _first_published(self, request: DeviceRequest) -> DeviceRequest:
        """Of a ``firstAvailable`` request's alternatives, the first the cluster publishes
        devices for, counted as what the pod asks (the allocator takes an alternative only
        where the earlier ones fail, and an alternative with no device anywhere always
        fails); the first one when none has devices, so the reason names what was asked."""
        for option in (request, *request.alternatives):
            if self.catalog.matches.devices.get(option.signature):
                return option
        return request

    def _charge(self, request: DeviceRequest, out: dict[str, int]) -> None:
        signature, count = request.signature, request.count
        all_devices, admin = request.all_devices, request.admin
        problem = self.catalog.matches.problems.get(signature)
        if problem is None and signature not in self.catalog.matches.charges:
            problem = f"DeviceClass {signature[0]}: its requests were not matched yet"
        if problem is None and all_devices:
            count = self.catalog.largest_node_counts.get(signature, 0)
            if not count:
                problem = f"DeviceClass {signature[0]}: allocationMode All matches no device"
        if problem is not None:
            # The devices still count as asked (describe's totals), and no node offers the
            # problem: the gang waits, and its reason names the problem.
            out[(UNCOUNTABLE_PREFIX + problem)[:_NAME_MAX]] = MILLI
            if not all_devices and not admin:
                own = resource_name(signature)
                out[own] = out.get(own, 0) + count * MILLI
            return
        if admin:
            return
        for resource, per_device in self.catalog.matches.charges[signature]:
            out[resource] = out.get(resource, 0) + count * per_device * MILLI


MAX_POD_CLAIMS = 128
"""Entries of a pod's ``spec.resourceClaims`` read (the API server allows 32)."""
_MAX_TERMS = 8
_NAME_MAX = 300
_SPEC_CACHE = 100_000


def _used(claims: Iterable[Mapping[str, Any]], live_pods: frozenset[str]) -> set[str]:
    """Device ids that allocated claims hold, leaving out what living pods are charged for
    instead: a claim reserved for one living pod alone, and the extended-resource claim of a
    living pod (admin access never counts). What is left is held by no pod Muster counts: a
    claim shared by several pods, or one left allocated after a failed bind or its pod's end.
    An id naming no published device (its pool replaced since) matches nothing."""
    used: set[str] = set()
    for claim in claims:
        results = as_mapping(_allocation(claim).get("devices")).get("results")
        if not isinstance(results, list):
            continue
        meta = _meta(claim)
        reserved = _reserved_for(claim)
        if reserved and reserved in live_pods:
            continue
        if as_mapping(meta.get("annotations")).get(EXTENDED_CLAIM_ANNOTATION) == "true" and any(
                as_mapping(o).get("uid") in live_pods for o in meta.get("ownerReferences") or ()):
            continue
        for result in results:
            r = as_mapping(result)
            if r.get("adminAccess") is True:
                continue
            used.add(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}")
    return used


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, object]:
    """A pod's ``status.resourceClaimStatuses``: its claim entry's name -> the claim made."""
    return {str(as_mapping(s).get("name")): as_mapping(s).get("resourceClaimName")
            for s in as_mapping(pod.get("status")).get("resourceClaimStatuses") or ()
            if isinstance(s, Mapping)}


def _reserved_for(claim: Mapping[str, Any]) -> str:
    """The UID of the one pod ``claim`` is reserved for, or ``""`` (none, several, or not a
    pod)."""
    entries = as_mapping(claim.get("status")).get("reservedFor")
    if not isinstance(entries, list) or len(entries) != 1:
        return ""
    entry = as_mapping(entries[0])
    if entry.get("resource") != "pods" or entry.get("apiGroup") not in (None, ""):
        return ""
    return str(entry.get("uid") or "")


def _groups(devices: tuple[Device, ...], match: str) -> list[tuple[Device, ...]]:
    """The devices one claim may take together: all of them, or with ``matchAttribute`` those
    sharing one value (the count offered is the largest such group's free count)."""
    if not match:
        return [devices]
    groups: dict[str | None, list[Device]] = {}
    for device in devices:
        groups.setdefault(attribute_value(device, match), []).append(device)
    return [tuple(g) for _, g in sorted(groups.items(), key=lambda kv: str(kv[0]))]
