"""Raw ``resource.k8s.io/v1`` objects as NVIDIA's GPU DRA driver and its chart publish them."""

from __future__ import annotations

from typing import Any

GPU_CLASS = "gpu.nvidia.com"
GPU_SELECTOR = ("device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'gpu'")
MIG_SELECTOR = ("device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'mig'")


def device_class(name: str = GPU_CLASS, *, selector: str = GPU_SELECTOR,
                 extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": spec}


def gpu(index: int, *, product: str = "NVIDIA H100 80GB HBM3", clique: str = "c0",
        kind: str = "gpu", consumes: dict[str, int] | None = None,
        counter_set: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": f"gpu-{index}" if kind == "gpu" else f"gpu-0-mig-{index}",
        "attributes": {"type": {"string": kind}, "productName": {"string": product},
                       "cliqueID": {"string": clique},
                       "uuid": {"string": f"GPU-{index:04d}"}},
        "capacity": {"memory": {"value": "80Gi"}},
    }
    if consumes:
        out["consumesCounters"] = [{"counterSet": counter_set, "counters": {
            k: {"value": str(v)} for k, v in consumes.items()}}]
    return out


def resource_slice(node: str, devices: list[dict[str, Any]], *, generation: int = 1,
                   count: int = 1, name: str = "", pool: str = "",
                   counters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "gpu.nvidia.com", "nodeName": node,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count}}
    if devices:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-gpu.nvidia.com-{generation}"}, "spec": spec}


def gpu_node_slice(node: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return resource_slice(node, [gpu(i) for i in range(gpus)], **kw)


def claim_spec(count: int = 8, device_class: str = GPU_CLASS,
               selectors: tuple[str, ...] = ()) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def template(name: str = "gpus", namespace: str = "default", **kw: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": claim_spec(**kw)}}


def claim(name: str, namespace: str = "default", *, allocated: list[tuple[str, str]] = (),  # type: ignore[assignment]
          owner_uid: str = "", extended: bool = False, **kw: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                    "uid": owner_uid, "controller": True}]
    if extended:
        meta["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    out: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": meta, "spec": claim_spec(**kw)}
    if allocated:
        out["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": pool, "device": device}
            for pool, device in allocated]}}}
    return out


def claim_pod(name: str, *, template_name: str = "", claim_name: str = "",
              generated: str = "", uid: str = "", gpus: int = 0,
              namespace: str = "default") -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "gpus"}
    if template_name:
        entry["resourceClaimTemplateName"] = template_name
    if claim_name:
        entry["resourceClaimName"] = claim_name
    container: dict[str, Any] = {"name": "main", "image": "x"}
    if gpus:
        container["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": {"containers": [container],
                 **({"resourceClaims": [entry]} if template_name or claim_name else {})},
    }
    if generated:
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpus",
                                                    "resourceClaimName": generated}]}
    return pod


def node(name: str, *, gpus: int = 0) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "capacity": alloc}}
