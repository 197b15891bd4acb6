"""The compatibility table of ``docs/compat.md``: index vs native catalog vs Karta catalog.

For every INDEX row whose file holds a kind the Karta catalog describes, resolve it three ways:
the index's figures, Muster's native catalog, and the Karta catalog read by Muster, plus the
``MinAvailable`` KAI's arithmetic would give. ``EXPLAINED`` says why each differing row differs;
the tests keep both in step with the code. Print the table with
``.venv/bin/python -m tests.unit.karta.compat``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from extender.core.karta.compile import descriptor_of
from extender.core.karta.kai import kai_gang_minimums
from extender.core.karta.model import Karta, read_karta
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import yaml_documents
from tests.unit.descriptors.examples import EXAMPLES, REPO, catalog
from tests.unit.descriptors.test_index_examples import ROWS, Row

KARTA_DIR = REPO.parent / "shared" / "karta-catalog"
_KARTAS: list[dict[tuple[str, str], Karta]] = []


def kartas() -> dict[tuple[str, str], Karta]:
    """The Karta catalog by ``(apiVersion, kind)`` of the root."""
    if not _KARTAS:
        out = {}
        for file in sorted(KARTA_DIR.glob("*.yaml")):
            k = read_karta(yaml.safe_load(file.read_text(encoding="utf-8")))
            assert k.root.kind is not None
            group, version, kind = k.root.kind
            out[(f"{group}/{version}" if group else version, kind)] = k
        _KARTAS.append(out)
    return _KARTAS[0]


def karta_catalog() -> Catalog:
    return Catalog.of(descriptor_of(k, source="karta-catalog") for k in kartas().values())


@dataclass(frozen=True)
class Figures:
    pods: int
    gpus: int
    gangs: tuple[tuple[int, int], ...]
    error: str = ""

    def cell(self) -> str:
        if self.error:
            return f"error: {self.error}"
        gangs = " ".join(f"{p}/{m}" for p, m in self.gangs) or "-"
        return f"{self.pods} / {self.gpus} / {gangs}"


@dataclass(frozen=True)
class CompatRow:
    row: Row
    index: Figures
    native: Figures
    karta: Figures
    kai: tuple[int, ...] | str

    @property
    def differs(self) -> bool:
        return (self.karta.error != "" or (self.karta.pods, self.karta.gpus, self.karta.gangs)
                != (self.index.pods, self.index.gpus, self.index.gangs)
                or isinstance(self.kai, str)
                or any(k != m for k, (_, m) in zip(self.kai, self.karta.gangs, strict=False)))


def _resolve(path: Path, cat: Catalog, *, only: set[tuple[str, str]]) -> Figures:
    pods = gpus = 0
    gangs: list[tuple[int, int]] = []
    for _, obj in yaml_documents(path.read_text(encoding="utf-8"), str(path)):
        if (obj.get("apiVersion"), obj.get("kind")) not in only:
            continue
        descriptor = cat.for_object(obj)
        if descriptor is None:
            continue
        try:
            tree = resolve_workload(obj, descriptor)
        except WorkloadError as err:
            return Figures(0, 0, (), error=str(err).split(": ", 1)[-1])
        pods += tree.pods
        gpus += tree.gpus
        gangs.extend((g.pods, g.min_member) for g in tree.gangs)
    return Figures(pods, gpus, tuple(sorted(gangs)))


def _kai(path: Path) -> tuple[int, ...] | str:
    out: list[int] = []
    for _, obj in yaml_documents(path.read_text(encoding="utf-8"), str(path)):
        karta = kartas().get((obj.get("apiVersion"), obj.get("kind")))
        if karta is None:
            continue
        try:
            out.extend(kai_gang_minimums(karta, obj))
        except WorkloadError:
            return "error"
    return tuple(sorted(out))


def covered(row: Row) -> set[tuple[str, str]]:
    """The ``(apiVersion, kind)`` of the row's documents that the Karta catalog describes."""
    found = set()
    for _, obj in yaml_documents((EXAMPLES / row.file).read_text(encoding="utf-8"), row.file):
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key in kartas():
            found.add(key)
    return found


def compat_rows() -> list[CompatRow]:
    kc = karta_catalog()
    out = []
    for row in ROWS:
        kinds = covered(row)
        if not kinds:
            continue
        path = EXAMPLES / row.file
        everything = {(str(a), str(k)) for _, obj in yaml_documents(
            path.read_text(encoding="utf-8"), row.file) for a, k in [(obj.get("apiVersion"),
                                                                      obj.get("kind"))]}
        out.append(CompatRow(
            row=row,
            index=Figures(row.pods, row.gpus, tuple(sorted(row.gangs))),
            native=_resolve(path, catalog(), only=everything),
            karta=_resolve(path, kc, only=kinds),
            kai=_kai(path),
        ))
    return out


#: Why the Karta catalog's figures differ from the index, per INDEX row.
_WHY0 = (
    'JobSet: `replicasPath` is `.replicas * .template.spec.parallelism` with no defaults; jq '
    'cannot multiply null, so a JobSet that leaves `replicas` or `parallelism` to its default'
    ' does not resolve (suspected problem confirmed)'
)
_WHY1 = (
    'JobSet: the gang key is the replicatedJob name, so Karta makes one gang per '
    'replicatedJob, not one for the JobSet; pods and minimums per replicatedJob are right'
)
_WHY2 = (
    "LWS: pods and per-group gangs agree; KAI's subtree arithmetic gives each group `size x "
    '(replicas + replicas x (size-1))` = replicas x size^2 (suspected problem confirmed: a '
    "minimum above the group's own pods can never be met)"
)
_WHY3 = (
    'Ray: `.workerGroupSpecs[]` (not `[]?`) fails on a cluster with no worker groups'
)
_WHY4 = (
    'Ray: `numOfHosts` is ignored, so a multi-host group counts replicas, not hosts '
    '(suspected problem confirmed)'
)
_WHY5 = (
    'PyTorchJob without a Master: `.Master.replicas // 1` invents a master pod; elastic '
    'minimum from `elasticPolicy.minReplicas` then adds it to the gang'
)
_WHY6 = (
    'KServe: Karta makes a gang of the predictor (and transformer) Deployment pods, which are'
    ' independent serving replicas (index: no gang)'
)
_WHY7 = (
    'KServe: Karta makes a gang of the predictor (and transformer) Deployment pods, which are'
    ' independent serving replicas (index: no gang); the InferenceGraph router is not in the '
    'Karta catalog'
)
_WHY8 = (
    'KServe multi-node: `workerSpec` is not a component, so its pod is missing; GPUs the '
    'controller injects are in neither catalog'
)
_WHY9 = (
    'LLMInferenceService: component `worker` reads `.spec.replicas` even without '
    '`.spec.worker`, inventing a pod; all components form one gang'
)
_WHY10 = (
    'Knative: Karta reads only `autoscaling.knative.dev/min-scale`; the legacy `minScale` '
    'spelling falls back to 1 per revision; the Deployment in the file has no gang in either'
)
_WHY11 = (
    "Knative: Karta makes a gang of each revision's pods, which are independent serving "
    'replicas (index: no gang)'
)
_WHY12 = (
    "Knative: Karta makes a gang of each revision's pods, which are independent serving "
    'replicas (index: no gang); the native catalog and Karta both read the two Services the '
    'file defines'
)
_WHY13 = (
    "Grove: KAI adds the scaling group's own scale (1) to the cliques' pods"
)
_WHY14 = (
    'Grove: cliques inside a PodCliqueScalingGroup are counted once, not once per '
    'scaling-group replica, so pods are undercounted; `minAvailable` is not read'
)
_WHY15 = (
    "Dynamo: GPUs are written as `gpu` in the service's own resources, which Karta passes "
    'through unrenamed, so no `nvidia.com/gpu` is counted'
)
_WHY16 = (
    "Dynamo: GPUs are written as `gpu` in the service's own resources, which Karta passes "
    'through unrenamed, so no `nvidia.com/gpu` is counted; one gang per service, not per '
    'service replica'
)
_WHY17 = (
    'NIMService multi-node: `multiNode` is not read, so one pod of 8 GPUs instead of a leader'
    ' and a worker of 8 each'
)
_WHY18 = (
    'The file also holds a NIMCache, which the Karta catalog describes (one caching pod) and '
    'the native catalog and the index leave out; NIMService pods form a gang'
)
_WHY19 = (
    'Milvus: replicas default in the operator, but Karta reads `.replicas` with no default, '
    'so unset components count 0 pods'
)
_WHY20 = (
    'Milvus: querynode and datanode form a gang (index: no gang)'
)
_WHY21 = (
    'Milvus: in-cluster etcd and MinIO dependencies are counted (the index counts Milvus '
    'components only) and three nodes form a gang'
)
_WHY22 = (
    'Milvus: replicas default in the operator, but Karta reads `.replicas` with no default, '
    'so unset components count 0 pods; `replicas: -1` (HPA) also counts 0'
)
_WHY23 = (
    'Ray: Karta takes `minReplicas` as the gang minimum even without '
    '`enableInTreeAutoscaling`, when KubeRay keeps the group at `replicas`'
)
_WHY24 = (
    "Job: Karta gangs the Job's parallel pods (index: no gang)"
)
_WHY25 = (
    "Grove without scaling groups: KAI's arithmetic fails on `.podCliqueScalingGroups[]` over"
    ' null; Muster never evaluates that component, which has no pods'
)
EXPLAINED: dict[str, str] = {
    '1': _WHY0,
    '5': _WHY0,
    '6': _WHY0,
    '7': _WHY0,
    '2': _WHY1,
    '3': _WHY1,
    '10': _WHY2,
    '11': _WHY2,
    '12': _WHY2,
    '13': _WHY2,
    '14': _WHY2,
    '15': _WHY2,
    '16': _WHY2,
    '17': _WHY2,
    '18': _WHY2,
    '20': _WHY3,
    '25': _WHY3,
    '23': _WHY4,
    '26': _WHY4,
    '32': _WHY5,
    '97': _WHY5,
    '47': _WHY6,
    '48': _WHY6,
    '49': _WHY6,
    '50': _WHY6,
    '51': _WHY6,
    '52': _WHY7,
    '54': _WHY8,
    '56': _WHY9,
    '57': _WHY10,
    '58': _WHY11,
    '59': _WHY11,
    '60': _WHY11,
    '61': _WHY11,
    '62': _WHY11,
    '63': _WHY11,
    '64': _WHY11,
    '65': _WHY11,
    '66': _WHY12,
    '67': _WHY13,
    '71': _WHY13,
    '73': _WHY13,
    '69': _WHY14,
    '70': _WHY14,
    '72': _WHY14,
    '74': _WHY14,
    '75': _WHY15,
    '76': _WHY15,
    '77': _WHY15,
    '78': _WHY15,
    '79': _WHY15,
    '81': _WHY15,
    '80': _WHY16,
    '82': _WHY17,
    '83': _WHY17,
    '84': _WHY18,
    '85': _WHY18,
    '86': _WHY18,
    '87': _WHY18,
    '89': _WHY18,
    '90': _WHY19,
    '91': _WHY19,
    '94': _WHY19,
    '92': _WHY20,
    '93': _WHY21,
    '95': _WHY22,
    '98': _WHY23,
    '99': _WHY24,
    '68': _WHY25,
}


def render_table(rows: list[CompatRow]) -> str:
    lines = ["| # | example | index | native | Karta in Muster | KAI MinAvailable | why |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        kai = r.kai if isinstance(r.kai, str) else " ".join(str(k) for k in r.kai) or "-"
        why = EXPLAINED.get(r.row.number, "") if r.differs else "same"
        lines.append(f"| {r.row.number} | `{r.row.stem}` | {r.index.cell()} | "
                     f"{r.native.cell()} | {r.karta.cell()} | {kai} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_table(compat_rows()), end="")
