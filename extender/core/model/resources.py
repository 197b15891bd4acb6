"""An immutable bag of resource amounts (milli-units), the currency of every capacity check."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView

from extender.core.model.quantity import format_quantity, parse_quantity

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Devices of a DRA DeviceClass, counted as the resource Kubernetes names after the class (plus
``#<digest>`` of a request's selectors, :mod:`extender.core.devices.matching`)."""
UNCOUNTABLE_PREFIX = "unschedulable: "
"""A demand no node supplies; the rest of the name says why (a missing DeviceClass...)."""
GPU_DEVICE_CLASS = DEVICE_CLASS_PREFIX + "gpu.nvidia.com"
"""NVIDIA's GPU DRA driver's class: its devices are GPUs where no extended resource says so."""


def device_phrase(name: str, amount: int) -> str | None:
    """How a reason says ``amount`` of a DRA resource (``8 gpu.nvidia.com devices``), or None
    for other resources."""
    if name.startswith(UNCOUNTABLE_PREFIX):
        return f"devices that cannot be counted ({name[len(UNCOUNTABLE_PREFIX):]})"
    if name.startswith(DEVICE_CLASS_PREFIX):
        device_class, _, digest = name[len(DEVICE_CLASS_PREFIX):].partition("#")
        which = f" matching its selectors ({digest})" if digest else ""
        return f"{amount // 1000} {device_class} device{'s' if amount != 1000 else ''}{which}"
    return None


#: Resources shown with binary suffixes when rendered for people.
_BINARY_RESOURCES = frozenset({MEMORY, EPHEMERAL_STORAGE})


class Resources(Mapping[str, int]):
    """Resource name -> amount in milli-units; zero amounts are dropped.

    Immutable and hashable. Arithmetic returns new values; ``fits_in`` is the per-node check
    (every amount of ``self`` is at most the same amount of ``other``; absent means zero).
    """

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, int] | None = None) -> None:
        self._items: dict[str, int] = (
            {k: v for k, v in sorted(items.items()) if v} if items else {}
        )
        self._hash: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, object] | None) -> Resources:
        """Build from an API ``ResourceList`` such as ``{"cpu": "500m", "nvidia.com/gpu": 4}``."""
        if not raw:
            return EMPTY
        return cls({str(name): parse_quantity(value) for name, value in raw.items()})

    @classmethod
    def of(cls, **amounts: int) -> Resources:
        """Whole units by keyword, for tests and literals: ``Resources.of(cpu=4, gpu=8)``.

        ``gpu`` means ``nvidia.com/gpu``; other keywords are resource names.
        """
        return cls({(GPU if k == "gpu" else k): v * 1000 for k, v in amounts.items()})

    def __getitem__(self, name: str) -> int:
        return self._items[name]

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        return self._items.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self) -> ItemsView[str, int]:
        # The dict's own view: Mapping's would look every name up again through __getitem__.
        return self._items.items()

    def values(self) -> ValuesView[int]:
        return self._items.values()

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __reduce__(self) -> tuple[type[Resources], tuple[dict[str, int]]]:
        # The kept hash stays behind: string hashes differ from one process to the next.
        return (Resources, (self._items,))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self.render()})"

    def __add__(self, other: Resources) -> Resources:
        if not other._items:
            return self
        out = dict(self._items)
        for name, amount in other._items.items():
            out[name] = out.get(name, 0) + amount
        return Resources(out)

    def __sub__(self, other: Resources) -> Resources:
        if not other._items:
            return self
        out = dict(self._items)
        for name, amount in other._items.items():
            out[name] = out.get(name, 0) - amount
        return Resources(out)

    def scale(self, factor: int) -> Resources:
        return Resources({k: v * factor for k, v in self._items.items()})

    def maximum(self, other: Resources) -> Resources:
        """Per-resource maximum (how kube-scheduler combines init containers)."""
        out = dict(self._items)
        for name, amount in other._items.items():
            if amount > out.get(name, 0):
                out[name] = amount
        return Resources(out)

    def fits_in(self, free: Resources) -> bool:
        get = free._items.get
        return all(amount <= get(name, 0) for name, amount in self._items.items())

    def shortfall(self, free: Resources) -> dict[str, int]:
        """Resources (and by how much) that ``free`` lacks to hold ``self``."""
        get = free._items.get
        return {
            name: amount - get(name, 0)
            for name, amount in self._items.items()
            if amount > get(name, 0)
        }

    def count_fitting(self, free: Resources) -> int:
        """How many copies of ``self`` fit in ``free`` (a large number if ``self`` is empty)."""
        best = 1 << 30
        get = free._items.get
        for name, amount in self._items.items():
            if amount > 0:
                best = min(best, max(get(name, 0), 0) // amount)
        return best

    def negative(self) -> dict[str, int]:
        """Amounts below zero: an oversubscription when this is a node's free capacity."""
        return {k: v for k, v in self._items.items() if v < 0}

    @property
    def gpus(self) -> int:
        """Whole ``nvidia.com/gpu`` units (requests are whole numbers); where there are none,
        devices of NVIDIA's DRA class ``gpu.nvidia.com`` (a class serving ``nvidia.com/gpu``
        charges both, so they are never counted twice)."""
        return (self._items.get(GPU) or self._items.get(GPU_DEVICE_CLASS, 0)) // 1000

    def render(self) -> str:
        return ", ".join(
            f"{name}={format_quantity(amount, binary=name in _BINARY_RESOURCES)}"
            for name, amount in self._items.items()
        )

    def to_api(self) -> dict[str, str]:
        """Back to a ``ResourceList`` of quantity strings."""
        return {
            name: format_quantity(amount, binary=name in _BINARY_RESOURCES)
            for name, amount in self._items.items()
        }


EMPTY = Resources()
