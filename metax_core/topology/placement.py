"""The one placement decision: the best N-GPU set on a node, given what is free (C9, docs/topology.md).

Why one function: the gpu-scheduler extender ranks nodes by the score of this set, topo-worker publishes the
same scores (and losses) in HAMi's annotations, and gpu-device answers kubelet's GetPreferredAllocation with
the same set. Same document, same function: the scheduler and the node agree by construction.

How a set is judged: every pair of GPUs has a link weight (`WEIGHTS`, MetaXLink best, across NUMA nodes
worst); a set's score is its mean pair weight (100 for one GPU). Among sets of equal score the one cutting the
fewest good links to the GPUs left free wins (its loss), then the smallest addresses. The search is exact
(every N-subset of the free GPUs): at most 2^16 subsets on a 16-GPU node, a few per published change.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import LinkKind, PciAddress
from metax_core.topology import document

WEIGHTS: Mapping[LinkKind, int] = {
    LinkKind.MX: 100,
    LinkKind.PIX: 80,
    LinkKind.PXB: 60,
    LinkKind.PHB: 40,
    LinkKind.NODE: 30,
    LinkKind.SYS: 10,
}
MAX_GPUS = 16
"""The exact search is refused beyond this many free GPUs (2^16 subsets); no MetaX board has more."""


def link(a: document.Gpu, b: document.Gpu) -> LinkKind:
    """How ``a`` reaches ``b``: MetaXLink, the same PCIe switch, the same root port, the same host bridge,
    the same NUMA node, or across NUMA nodes (the vocabulary of ``mx-smi topo -m``)."""
    if b.address in a.metaxlink or a.address in b.metaxlink:
        return LinkKind.MX
    common = 0
    for x, y in zip(a.pcie_path, b.pcie_path, strict=False):
        if x != y:
            break
        common += 1
    if common >= 2:
        return LinkKind.PIX
    if common == 1:
        return LinkKind.PXB
    if a.pcie_path and b.pcie_path and a.pcie_path[0].rsplit(":", 1)[0] == b.pcie_path[0].rsplit(":", 1)[0]:
        return LinkKind.PHB
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return LinkKind.NODE
    return LinkKind.SYS


@attrs.frozen
class Choice:
    """The chosen GPUs (sorted), their score (mean pair weight, 0–100) and loss (mean weight of the links
    from them to the GPUs left free, 0 when none is left)."""

    gpus: tuple[PciAddress, ...]
    score: int
    loss: int


def _weights(gpus: Sequence[document.Gpu]) -> list[list[int]]:
    return [[0 if i == j else WEIGHTS[link(a, b)] for j, b in enumerate(gpus)] for i, a in enumerate(gpus)]


def _pool(topology: document.NodeTopology, free: Iterable[PciAddress] | None) -> list[document.Gpu]:
    known = topology.by_address()
    chosen = topology.free if free is None else tuple(free)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise InvalidSpec([FieldError("free", f"{a} is not one of the node's GPUs") for a in unknown])
    pool = [known[a] for a in sorted(set(chosen))]
    if len(pool) > MAX_GPUS:
        raise InvalidSpec([FieldError("free", f"{len(pool)} free GPUs, at most {MAX_GPUS} are placed exactly")])
    return pool


def _search(
    pool: Sequence[document.Gpu], sizes: Collection[int], must: Collection[PciAddress] = ()
) -> dict[int, Choice]:
    """Every subset of ``pool`` whose size is wanted (holding every ``must`` GPU), by depth-first extension
    with running sums."""
    w = _weights(pool)
    required = {i for i, g in enumerate(pool) if g.address in must}
    k = len(pool)
    row = [sum(r) for r in w]
    top = max(sizes, default=0)
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {}

    def visit(members: tuple[int, ...], inner: int, start: int) -> None:
        n = len(members)
        if n in sizes and required.issubset(members):
            cut = sum(row[m] for m in members) - 2 * inner
            key = (-inner, cut, members)
            if n not in best or key < best[n]:
                best[n] = key
        if n == top:
            return
        for nxt in range(start, k):
            visit((*members, nxt), inner + sum(w[nxt][m] for m in members), nxt + 1)

    visit((), 0, 0)
    out: dict[int, Choice] = {}
    for n, (neg_inner, cut, members) in best.items():
        pairs = n * (n - 1) // 2
        rest = k - n
        score = 100 if n == 1 else round(-neg_inner / pairs)
        loss = round(cut / (n * rest)) if rest else 0
        out[n] = Choice(tuple(pool[m].address for m in members), score, loss)
    return out


def best_set(
    topology: document.NodeTopology,
    n: int,
    free: Iterable[PciAddress] | None = None,
    *,
    must: Collection[PciAddress] = (),
) -> Choice | None:
    """The best ``n`` GPUs among ``free`` (the document's free set when None) holding every ``must`` one
    (kubelet's must-include devices); None when fewer are free or more than ``n`` must be held."""
    pool = _pool(topology, free)
    held = set(must) & {g.address for g in pool}
    if n < 1 or n > len(pool) or len(held) > n:
        return None
    return _search(pool, {n}, held).get(n)


def best_sets(topology: document.NodeTopology, free: Iterable[PciAddress] | None = None) -> dict[int, Choice]:
    """`best_set` for every count from 1 to the number of free GPUs, in one search."""
    pool = _pool(topology, free)
    return _search(pool, set(range(1, len(pool) + 1)))


# --- HAMi's annotations ---------------------------------------------------------------------------------------


def hami_annotations(topology: document.NodeTopology) -> dict[str, str]:
    """``gpu.topology.scores`` and ``.losses`` for every GPU count the free set allows (`encode_counts`)."""
    choices = best_sets(topology)
    return {
        document.SCORES: encode_counts({n: c.score for n, c in choices.items()}),
        document.LOSSES: encode_counts({n: c.loss for n, c in choices.items()}),
    }


def encode_counts(values: Mapping[int, int]) -> str:
    return json.dumps({str(n): values[n] for n in sorted(values)}, separators=(",", ":"))


def decode_counts(text: str, *, key: str = document.SCORES) -> dict[int, int]:
    """``{"<gpu count>": value}`` back into ints; `InvalidSpec` naming ``key`` otherwise."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError(key, f"not JSON: {exc}")]) from exc
    if not isinstance(raw, dict):
        raise InvalidSpec([FieldError(key, 'must be a JSON object {"<gpu count>": value}')])
    out: dict[int, int] = {}
    errors = []
    for k, v in raw.items():
        if not (isinstance(k, str) and k.isdigit() and int(k) > 0) or isinstance(v, bool) or not isinstance(v, int):
            errors.append(FieldError(f"{key}.{k}", "must map a GPU count (> 0) to an integer"))
            continue
        out[int(k)] = v
    if errors:
        raise InvalidSpec(errors)
    return out
