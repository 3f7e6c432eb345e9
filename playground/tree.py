"""One generation tree: every continuation of one prompt, token by token.

Node 0 stands for the prompt; every other node is one token appended to its parent, holding
the model's `TokenRecord` for it. A chat answer, a step-by-step session and a beam search are
paths (or a subtree) of such a tree, so moving between them hands over records instead of
recomputing them: a beam node or a chat token opens in Step by step with its path's numbers,
and a step path continues as a chat answer.

A feature may keep its own facts on each node by subclassing `TreeNode` (a dataclass whose
extra fields all have defaults): the beam search's nodes add their fate and score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Generic, TypeVar

from playground.engine.records import TokenRecord
from playground.engine.tokens import CONTEXT_TOKENS, read_after
from playground.errors import PlaygroundError

ROOT = 0  # node id of the prompt


@dataclass
class TreeNode:
    id: int
    parent: int | None  # None for the root
    token: TokenRecord | None  # None for the root (the prompt)
    children: list[int] = field(default_factory=list)

    @property
    def token_id(self) -> int | None:
        return None if self.token is None else self.token.id

    def own_fields(self) -> dict[str, Any]:
        """A subclass's extra fields (what to_dict writes besides the token)."""
        base = {f.name for f in fields(TreeNode)}
        return {k: v for k, v in asdict(self).items() if k not in base}


N = TypeVar("N", bound=TreeNode)


class GenerationTree(Generic[N]):
    """The continuations of `prompt_ids` (see the module docstring). node_type: TreeNode or a
    subclass; root_fields: its extra fields for the root."""

    def __init__(self, prompt_ids: Sequence[int], node_type: type[N] = TreeNode, **root_fields: Any) -> None:  # type: ignore[assignment]
        self.prompt_ids = list(prompt_ids)
        self.node_type = node_type
        self.nodes: list[N] = [node_type(ROOT, None, None, **root_fields)]

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, node_id: Any) -> N:
        """The node, or a clear error for an id that is not in the tree."""
        if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id < len(self.nodes):
            raise PlaygroundError(
                "No node {node!r} in this tree (0..{last}).",
                key="tree.error.no_node",
                node=node_id,
                last=len(self.nodes) - 1,
            )
        return self.nodes[node_id]

    def child(self, parent: int, token_id: int) -> int | None:
        """The child of parent for token_id, if there is one."""
        return next((c for c in self.nodes[parent].children if self.nodes[c].token_id == token_id), None)

    def add(self, parent: int, record: TokenRecord, *, reuse: bool = True, **own: Any) -> int:
        """Append a token under parent (own: a subclass's fields); with reuse, an existing child
        for the same token is returned instead (its record kept: the numbers are the same model's)."""
        existing = self.child(parent, record.id) if reuse else None
        if existing is not None:
            return existing
        node = self.node_type(len(self.nodes), parent, record, **own)
        self.nodes.append(node)
        self.nodes[parent].children.append(node.id)
        return node.id

    def extend(self, parent: int, records: Iterable[TokenRecord]) -> list[int]:
        """Append a chain of tokens under parent; returns their node ids."""
        ids = []
        for record in records:
            parent = self.add(parent, record)
            ids.append(parent)
        return ids

    def truncate(self, count: int) -> None:
        """Remove every node created after the first `count` (undo a failed change)."""
        for node in self.nodes[count:]:
            if node.parent is not None and node.parent < count:
                self.nodes[node.parent].children.remove(node.id)
        del self.nodes[count:]

    def path(self, node_id: int) -> list[int]:
        """Node ids from the root to node_id, both included."""
        path: list[int] = []
        current: int | None = self.node(node_id).id
        while current is not None:
            path.append(current)
            current = self.nodes[current].parent
        return path[::-1]

    def records(self, node_id: int) -> list[TokenRecord]:
        """The records of the tokens from the prompt to node_id."""
        return [self.nodes[n].token for n in self.path(node_id)[1:]]  # type: ignore[misc]

    def token_ids(self, node_id: int) -> list[int]:
        """Generated ids from the prompt to node_id (prompt excluded)."""
        return [record.id for record in self.records(node_id)]

    def ids(self, node_id: int) -> list[int]:
        """Prompt ids followed by the generated ids up to node_id."""
        return self.prompt_ids + self.token_ids(node_id)

    def label(self, node_id: int) -> str:
        """The node's token as it reads on its path ("prompt" for the root): a byte piece names
        its character where the tree settles it (its first bytes on the ancestors, its last down
        the first children: the first continuation added, a beam's best), else which byte of a
        how-long character it is."""
        token = self.node(node_id).token
        if token is None or not token.visible.startswith("<0x"):
            return "prompt" if token is None else token.visible
        before = [self.nodes[n].token for n in self.path(node_id)[1:-1][-CONTEXT_TOKENS:]]
        after, kids = [], self.nodes[node_id].children
        while kids and len(after) < CONTEXT_TOKENS:
            after.append(self.nodes[kids[0]].token)
            kids = self.nodes[kids[0]].children
        return read_after(before, [token, *after])[0].visible  # type: ignore[list-item]

    def depth(self, node_id: int) -> int:
        return len(self.path(node_id)) - 1

    def leaves(self) -> list[int]:
        """Every node without children (the root only when the tree is empty), oldest first."""
        return [n.id for n in self.nodes if not n.children and (n.id != ROOT or len(self.nodes) == 1)]

    def walk(self, token_ids: Sequence[int], start: int = ROOT) -> int | None:
        """The node reached by following token_ids from start, or None where the tree ends."""
        node: int | None = start
        for token_id in token_ids:
            node = self.child(node, token_id) if node is not None else None
        return node

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the prompt, the root's own fields, every node in id order."""
        return {
            "prompt_ids": list(self.prompt_ids),
            "root": self.nodes[0].own_fields(),
            "nodes": [
                {"id": n.id, "parent": n.parent, "token": n.token.to_dict(), **n.own_fields()}  # type: ignore[union-attr]
                for n in self.nodes[1:]
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], node_type: type[N] = TreeNode) -> GenerationTree[N]:  # type: ignore[assignment]
        """Inverse of to_dict (node ids are kept)."""
        tree = cls(data["prompt_ids"], node_type, **data.get("root", {}))
        for item in data["nodes"]:
            item = dict(item)
            node_id, parent, token = item.pop("id"), item.pop("parent"), item.pop("token")
            if node_id != len(tree.nodes) or not isinstance(parent, int) or not 0 <= parent < node_id:
                raise PlaygroundError(
                    "Tree node {node!r} is out of order or has a bad parent.",
                    key="tree.error.order",
                    node=node_id,
                )
            tree.add(parent, TokenRecord.from_dict(token), reuse=False, **item)
        return tree
