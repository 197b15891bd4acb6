"""The one YAML loader every file Muster reads goes through (JSON is YAML too).

PyYAML's ``SafeLoader`` builds no arbitrary objects but trusts a document's shape: 20,000
nested ``[`` exhaust Python's recursion (a ``RecursionError`` traceback), and a few hundred
bytes of aliases to aliases ("billion laughs") stand for a billion nodes that anything walking
the result (``str()``, a JSON dump) then expands. :class:`BoundedLoader` refuses both while it
composes, before any value is built, with a :class:`yaml.YAMLError` that carries the line, so
every caller reports ``FILE:DOC: not valid YAML (line N): ...`` as for a syntax error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

#: Deepest nesting of lists and maps accepted. Kubernetes objects nest a few dozen levels (a
#: JobSet's container port is about 20 down); this leaves room and stays far below Python's
#: recursion limit and orjson's depth limits.
MAX_DEPTH = 128

#: Nodes that aliases may stand for in one document, counted fully expanded. Manifests use
#: aliases rarely and for small blocks; a bomb needs millions.
MAX_ALIAS_NODES = 100_000


class BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses nesting beyond :data:`MAX_DEPTH` and aliases expanding to
    more than :data:`MAX_ALIAS_NODES` nodes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliased = 0

    def compose_document(self) -> Node | None:
        self._aliased = 0
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            # The anchored node is shared, not copied, but whoever walks the value walks it
            # once per alias: count what it stands for.
            self._aliased += _expanded(node)
            if self._aliased > MAX_ALIAS_NODES:
                raise ComposerError(None, None, f"aliases expand to more than "
                                    f"{MAX_ALIAS_NODES} nodes (an alias bomb?)",
                                    event.start_mark)
            return node
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                    event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            node.expanded = _size(node)  # type: ignore[attr-defined]  # read by aliases
        return node


#: Longest integer literal read as a number: a count or quantity has a few digits, and Python
#: refuses to convert more than 4,300 (a ``ValueError`` from deep inside PyYAML).
MAX_INT_DIGITS = 100


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
    if len(node.value) > MAX_INT_DIGITS:
        raise ConstructorError(None, None, f"an integer of {len(node.value)} digits is too long "
                               f"(at most {MAX_INT_DIGITS})", node.start_mark)
    return loader.construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _expanded(node: Node | None) -> int:
    return int(getattr(node, "expanded", 1))


def _size(node: Node) -> int:
    """Nodes ``node`` stands for, expanded (its children are composed and sized already)."""
    if isinstance(node, SequenceNode):
        return 1 + sum(_expanded(child) for child in node.value)
    if isinstance(node, MappingNode):
        return 1 + sum(_expanded(k) + _expanded(v) for k, v in node.value)
    return 1


def load_all(text: str) -> Iterator[Any]:
    """Every document of a YAML (or JSON) stream, as :func:`yaml.safe_load_all` gives them."""
    loader = BoundedLoader(text)
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            yield loader.get_data()
    finally:
        loader.dispose()

