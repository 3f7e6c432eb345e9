"""What a beam search did, as data: its tree of expanded tokens, the hypotheses, the settings.

The tree is a `GenerationTree` whose nodes (`BeamNode`) add the search's facts to each
token's record: at which step it was expanded, its cumulative log-prob and score, and its
fate (kept as a running beam, pruned, or finished). Drawing lives in playground/plots/beam.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from playground.engine.records import TokenRecord
from playground.messages import Message, message_data, message_from_data
from playground.tree import GenerationTree, TreeNode

# Fates of a node.
ROOT, KEPT, PRUNED, FINISHED = "root", "kept", "pruned", "finished"
# A node's fate as people read it
FATES = {
    ROOT: Message("beam.fate.root", "root"),
    KEPT: Message("beam.fate.kept", "kept"),
    PRUNED: Message("beam.fate.pruned", "pruned"),
    FINISHED: Message("beam.fate.finished", "finished"),
    "greedy": Message("beam.fate.greedy", "greedy"),
}


@dataclass
class BeamNode(TreeNode):
    """One expanded token (a candidate continuation of a running beam at one step); node 0 is
    the prompt. `token` is the model's record: raw log-prob, rank, entropy, and as
    sampled_prob the probability after the model's logits processors."""

    step: int = 0  # 1 = first generated token; 0 for the root
    logprob: float = 0.0  # log p(token | prefix) after the logits processors: what the search adds up
    cum_logprob: float = 0.0  # sum of logprob along the path from the root
    score: float = 0.0  # cum_logprob / step ** length_penalty (the score a finished hypothesis gets)
    fate: str = ROOT  # "kept" (a running beam next step), "pruned", "finished" or "root"
    ended: bool = False  # the token ends the text: an EOS token or the last allowed step
    rank: int | None = None  # 1-based rank among the returned hypotheses, if returned
    note: str = ""  # why: "outranked", "ended, not among the best", "finished, later outranked"...

    @property
    def label(self) -> str:
        """The token with whitespace, bytes and specials made visible; "prompt" for the root."""
        return "prompt" if self.token is None else self.token.visible

    @property
    def text(self) -> str:
        return "" if self.token is None else self.token.text


@dataclass
class Hypothesis:
    """One returned sequence, in final order (rank 1 = best)."""

    rank: int
    node_id: int  # the node of its last token
    token_ids: list[int]  # generated ids, prompt excluded, no padding
    text: str  # the generated ids decoded (special tokens kept)
    score: float  # final length-normalised score (generate's sequences_scores)
    cum_logprob: float


@dataclass
class GreedyToken:
    """One token of the greedy continuation (argmax every step), for the overlay."""

    step: int
    token: TokenRecord
    cum_logprob: float
    node_id: int | None = None  # the tree node with the same prefix, when the search recorded it

    @property
    def label(self) -> str:
        return self.token.visible

    @property
    def logprob(self) -> float:
        return self.token.logprob


@dataclass
class BeamSettings:
    """The settings the search ran with."""

    num_beams: int
    max_new_tokens: int
    length_penalty: float
    early_stopping: bool | str
    num_return_sequences: int
    chat: bool
    candidates_per_beam: int


@dataclass
class BeamTree:
    """Everything a beam search did. `sequences` EXCLUDE the prompt (see `prompt_ids`)."""

    prompt: str  # the user's text
    prompt_text: str  # the text that was tokenized (chat template applied when chat=True)
    prompt_ids: list[int]
    settings: BeamSettings
    tree: GenerationTree[BeamNode]
    hypotheses: list[Hypothesis]  # best first
    # Generated ids of the hypotheses, best first, padded with `pad_token_id` to a common
    # length exactly as generate pads: equals generate(...).sequences[:, len(prompt_ids):].
    sequences: list[list[int]]
    scores: list[float]  # equals generate(...).sequences_scores
    pad_token_id: int
    eos_token_ids: list[int]
    steps_run: int
    stop_reason: str
    seconds: float
    greedy: list[GreedyToken] | None = None
    greedy_text: str | None = None  # the greedy tokens decoded as one sequence
    stopped: bool = False  # Stop ended it part way: its hypotheses are its best beams as they stood

    @property
    def nodes(self) -> list[BeamNode]:
        return self.tree.nodes

    def children(self, node_id: int) -> list[int]:
        """Ids of the nodes whose parent is node_id, best cumulative log-prob first."""
        return sorted(self.tree.nodes[node_id].children, key=lambda i: -self.tree.nodes[i].cum_logprob)

    def path(self, node_id: int) -> list[BeamNode]:
        """The nodes from the first generated token to node_id (root excluded)."""
        return [self.tree.nodes[n] for n in self.tree.path(node_id)[1:]]

    def records(self, node_id: int) -> list[TokenRecord]:
        """The token records from the prompt to node_id (what Step by step takes over)."""
        return self.tree.records(node_id)

    def prefix_ids(self, node_id: int) -> list[int]:
        """Prompt ids followed by the generated ids up to and including node_id."""
        return self.tree.ids(node_id)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the export format)."""
        structured = ("tree", "settings", "hypotheses", "greedy")
        return {
            **{k: v for k, v in vars(self).items() if k not in structured},
            "settings": asdict(self.settings),
            "tree": self.tree.to_dict(),
            "hypotheses": [asdict(h) for h in self.hypotheses],
            "greedy": None if self.greedy is None else [_greedy_dict(g) for g in self.greedy],
            "stop_message": message_data(self.stop_reason),  # the reason again in any language
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BeamTree:
        """Inverse of to_dict."""
        values = dict(data)
        values["settings"] = BeamSettings(**data["settings"])
        values["tree"] = GenerationTree.from_dict(data["tree"], BeamNode)
        values["hypotheses"] = [Hypothesis(**hyp) for hyp in data["hypotheses"]]
        greedy = data.get("greedy")
        values["greedy"] = None if greedy is None else [_greedy_from(g) for g in greedy]
        values["stop_reason"] = message_from_data(values.pop("stop_message", None), data["stop_reason"])
        return cls(**values)


def _greedy_dict(token: GreedyToken) -> dict[str, Any]:
    return {
        "step": token.step,
        "token": token.token.to_dict(),
        "cum_logprob": token.cum_logprob,
        "node_id": token.node_id,
    }


def _greedy_from(data: dict[str, Any]) -> GreedyToken:
    return GreedyToken(
        data["step"], TokenRecord.from_dict(data["token"]), data["cum_logprob"], data["node_id"]
    )


def describe_node(node: BeamNode, label: str | None = None) -> str:
    """One line for lists: id, step, token (label: as it reads on its path), score, fate (and rank)."""
    if node.fate == ROOT:
        return Message("beam.node.root", "#0 · the prompt")
    rank = Message("beam.node.rank", " · rank {rank}", rank=node.rank) if node.rank else ""
    token = node.label if label is None else label
    return Message(
        "beam.node.line",
        "#{id} · step {step} · {token} · score {score:.3f} · {fate}{rank}",
        id=node.id,
        step=node.step,
        token=token,
        score=node.score,
        fate=FATES.get(node.fate, node.fate),
        rank=rank,
    )
