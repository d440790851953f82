"""A compact, data-driven evaluator for LightGBM ensembles, generated as portable C.

TL2cgen writes every tree as nested if/else: the demo bundle's 80 trees are ~50 KB of code
(MAT's 32 more), and a decision in a replay (caches and branch predictors cold between two
IOs) spends most of its time fetching that code and mispredicting its branches. This
evaluator keeps the trees as a few KB of data read by two small loops without a
data-dependent branch (the same idea as fast_trees.py's, for any x86-64 or other CPU):

1. Binning. Every split compares a feature with one of that feature's thresholds. With the
   feature's distinct thresholds sorted, `x <= t_k` holds exactly when fewer than k + 1 of
   them are below x, so each feature becomes one byte, bin = #{t : t < x}, counted by
   straight-line code (one comparison per threshold, no branch: measured 5-10% faster hot
   and cold than a loop per feature), and each split the integer test `bin > k` (go right).
2. Nodes of 4 bytes {bin index, threshold rank, left child, right child}: a 15-leaf tree's
   internal nodes fit one cache line, every tree at the same stride; a child >= 128 is leaf
   child - 128. The walk selects the next node with masks (no branch on the data) and walks
   INTERLEAVE trees at once so their loads overlap.
3. Missing values, per split as LightGBM and TL2cgen decide them: a NaN input goes to the
   split's default side (Treelite's default_left: the learned side, or where 0.0 goes for a
   feature trained without missing values). Each feature has two bins, f and F + f, equal
   for a number; for NaN bin f is 0 (every split goes left: nodes that send NaN left read
   it) and bin F + f is 255 (every split goes right: those that send it right read it).
4. The leaves added in tree order from 0.0, then the base score, then the postprocessor
   (identity or sigmoid `1 / (1 + exp(-alpha * s))`), exactly as TL2cgen's code and
   LightGBM do: every score is the same double.

Every split compares the float64 input with its float64 threshold (binning compares the same
doubles), as TL2cgen's code does (quantize off). Models outside the byte layout (more than
128 features, 254 distinct thresholds of a feature, 128 leaves a tree) or with categorical
splits or another operator than <= stay on TL2cgen's code (`plan` says why).
`reference_margin` walks the same tables in numpy for tests on any machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.compiler.fast_trees import (
    LEAF,
    c_array,
    c_hex,
    header_refusal,
    model_header,
    split_refusal,
    tree_arrays,
)

#: Trees walked at once (their node loads overlap).
INTERLEAVE = 4
#: Children at or above LEAF_BASE are leaves (child - LEAF_BASE): internal nodes per tree
#: and leaves per tree are at most this many.
LEAF_BASE = 128
#: Bytes of code from the evaluator's entry its prefetch hint loads (binning + walk).
PREFETCH_CODE_BYTES = 2048
#: Bin indices are bytes: 2 per feature.
MAX_FEATURES = 128
#: A feature's distinct thresholds: ranks 0..253, 255 = a node that never goes right.
MAX_THRESHOLDS = 254
NEVER_RIGHT = 255


@dataclass(frozen=True)
class CompactTrees:
    """One ensemble in the compact evaluator's layout."""

    num_features: int
    thresholds: list[np.ndarray]  # per feature: sorted distinct float64 thresholds
    # uint8 [trees, width, 4]: per internal node its bin index (f, or F + f where a NaN goes
    # right), threshold rank, left child, right child (>= LEAF_BASE: a leaf)
    nodes: np.ndarray
    leaves: np.ndarray  # float64 [trees, width + 1]: leaf values
    depths: np.ndarray  # int64 [trees]: steps from the root to the deepest leaf (>= 1)
    base_score: float
    postprocessor: str
    sigmoid_alpha: float

    @property
    def num_trees(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def width(self) -> int:
        """Node slots per tree (the largest tree's internal nodes, at least 1)."""
        return int(self.nodes.shape[1])


def plan(model: Any) -> CompactTrees | str:
    """CompactTrees for a Treelite model, or why the compact evaluator cannot take it."""
    head = model_header(model)
    why = header_refusal(head)
    if why:
        return why
    nf = int(head["num_feature"])
    if nf > MAX_FEATURES:
        return f"{nf} features (the evaluator indexes at most {MAX_FEATURES})"
    trees = tree_arrays(model)
    why = split_refusal(trees)
    if why:
        return why
    thr: list[set[float]] = [set() for _ in range(nf)]
    width = 1
    for ti, t in enumerate(trees):
        inner = int(np.count_nonzero(t["node_type"] != LEAF))
        if inner >= LEAF_BASE:
            return f"tree {ti} has {inner + 1} leaves (at most {LEAF_BASE})"
        width = max(width, inner)
        for i, kind in enumerate(t["node_type"]):
            if kind != LEAF:
                th = float(t["threshold"][i])
                if math.isnan(th):
                    return "a NaN threshold"
                thr[int(t["split_index"][i])].add(th)
    sorted_thr = [np.array(sorted(s), dtype=np.float64) for s in thr]
    for f, s in enumerate(sorted_thr):
        if len(s) > MAX_THRESHOLDS:
            return f"feature {f} has {len(s)} distinct thresholds (at most {MAX_THRESHOLDS})"
    rank_of = [{float(v): i for i, v in enumerate(s)} for s in sorted_thr]
    nt = len(trees)
    nodes = np.zeros((nt, width, 4), np.uint8)
    nodes[:, :, 1] = NEVER_RIGHT
    nodes[:, :, 2] = nodes[:, :, 3] = LEAF_BASE
    leaves = np.zeros((nt, width + 1), np.float64)
    depths = np.ones(nt, np.int64)  # a one-leaf tree: node 0 leads to leaf 0 in one step
    for ti, t in enumerate(trees):
        counters = [0, 0]  # internal nodes, leaves numbered so far (preorder)
        # (node id, parent slot, side, depth)
        stack: list[tuple[int, int, int, int]] = [(0, -1, 0, 0)]
        while stack:
            nid, parent, side, depth = stack.pop()
            depths[ti] = max(depths[ti], depth)
            if t["node_type"][nid] == LEAF:
                j = counters[1]
                counters[1] += 1
                leaves[ti, j] = float(t["leaf_value"][nid])
                slot = LEAF_BASE + j
            else:
                slot = counters[0]
                counters[0] += 1
                f = int(t["split_index"][nid])
                nodes[ti, slot, 0] = f if t["default_left"][nid] else nf + f
                nodes[ti, slot, 1] = rank_of[f][float(t["threshold"][nid])]
                stack.append((int(t["cright"][nid]), slot, 3, depth + 1))
                stack.append((int(t["cleft"][nid]), slot, 2, depth + 1))
            if parent >= 0:
                nodes[ti, parent, side] = slot
        # a one-leaf tree: node 0 never goes right, and leads to leaf 0 either way (as set)
    base = head.get("base_scores", [0.0])
    return CompactTrees(num_features=nf, thresholds=sorted_thr, nodes=nodes, leaves=leaves,
                        depths=depths,
                        base_score=float(base[0]), postprocessor=str(head["postprocessor"]),
                        sigmoid_alpha=float(head.get("sigmoid_alpha", 1.0)))


def _bins(ct: CompactTrees, x: np.ndarray) -> np.ndarray:
    """Every row's 2F bins (uint8 values as int64)."""
    nf = ct.num_features
    out = np.zeros((x.shape[0], 2 * nf), np.int64)
    nan = np.isnan(x)
    for f, t in enumerate(ct.thresholds):
        c = np.searchsorted(t, np.where(nan[:, f], -np.inf, x[:, f]), side="left")
        out[:, f] = np.where(nan[:, f], 0, c)
        out[:, nf + f] = np.where(nan[:, f], 255, c)
    return out


def reference_margin(ct: CompactTrees, x: np.ndarray) -> np.ndarray:
    """The raw score (leaves in tree order + base score) of each row of x, from the tables."""
    x = np.asarray(x, dtype=np.float64)
    bins = _bins(ct, x)
    rows = np.arange(x.shape[0])
    s = np.zeros(x.shape[0], np.float64)
    for t in range(ct.num_trees):
        nd = ct.nodes[t].astype(np.int64)
        i = np.zeros(x.shape[0], np.int64)
        while (inner := i < LEAF_BASE).any():
            j = np.where(inner, i, 0)
            right = bins[rows, nd[j, 0]] > nd[j, 1]
            i = np.where(inner, np.where(right, nd[j, 3], nd[j, 2]), i)
        s = s + ct.leaves[t][i - LEAF_BASE]
    return s + ct.base_score


def emit_c(ct: CompactTrees, symbol: str) -> str:
    """C11 source defining `double <symbol>(const double *x)` (the score, with the
    postprocessor) and `double <symbol>_margin(const double *x)` (the raw margin) for one
    row x in the model's feature order; portable (no intrinsics), everything else static."""
    p, nf, nt, w, k = symbol, ct.num_features, ct.num_trees, ct.width, INTERLEAVE
    thr: list[float] = []
    binning = []
    for f, t in enumerate(ct.thresholds):
        if not len(t):  # no node reads this feature
            binning.append(f"    bins[{f}] = bins[{nf + f}] = 0;\n")
            continue
        count = " +\n                     ".join(
            " + ".join(f"(uint32_t)(t[{j}] < v)" for j in range(i, min(i + 4, len(t))))
            for i in range(0, len(t), 4))
        binning.append(f"""    {{ /* feature {f}: {len(t)} thresholds */
        const double v = x[{f}];
        const double *t = {p}_thr + {len(thr)};
        const uint32_t c = {count};
        bins[{f}] = (uint8_t)c;
        bins[{nf + f}] = v != v ? (uint8_t)255 : (uint8_t)c;
    }}
""")
        thr += [float(v) for v in t]
    # one spare node slot after the last tree: a finished walk of the last tree reads slot
    # (leaf index) <= width there, and throws the value away
    nodes = [str(int(v)) for v in ct.nodes.reshape(-1)] + ["0"] * 4
    leaves = [c_hex(float(v)) for v in ct.leaves.reshape(-1)]
    if ct.postprocessor == "sigmoid":
        post = (f"    return (double)(1) / ((double)(1) + exp(-(double){c_hex(ct.sigmoid_alpha)}"
                " * s));\n")
    else:
        post = "    return s;\n"
    start = "\n".join(f"        const uint8_t *n{j} = {p}_nodes + 4 * {w} * (t + {j});\n"
                      f"        uint32_t i{j} = 0;" for j in range(k))
    done = " & ".join(f"i{j}" for j in range(k))
    walk = "\n".join(f"            i{j} = {p}_step(n{j}, i{j}, bins);" for j in range(k))
    adds = "\n".join(f"        s += {p}_leaves[{w + 1} * (t + {j}) + (i{j} - {LEAF_BASE})];"
                      for j in range(k))
    tail = "".join(f"""    {{ /* tree {t} */
        const uint8_t *n = {p}_nodes + {4 * w * t};
        uint32_t i = 0;
        while (i < {LEAF_BASE}u) {{
            i = {p}_step(n, i, bins);
        }}
        s += {p}_leaves[{(w + 1) * t} + (i - {LEAF_BASE})];
    }}
""" for t in range(nt - nt % k, nt))
    prefetch = "".join(
        f"    for (int i = 0; i < (int)sizeof {p}_{t}; i += 64) "
        f"__builtin_prefetch((const char *){p}_{t} + i);\n"
        for t in (["thr"] if thr else []) + ["nodes", "leaves"])
    thr_table = ("/* every feature's sorted distinct thresholds, feature after feature */\n"
                 + c_array(f"{p}_thr", "double", [c_hex(v) for v in thr], per_line=4)
                 if thr else "")
    return f"""/* GENERATED by flashml.compiler.compact_trees: {nt} trees, {nf} features, \
{len(thr)} thresholds, {w} node slots a tree; do not edit. */
#include <math.h>
#include <stdint.h>

double {p}_margin(const double *x);
double {p}(const double *x);
void {p}_prefetch(void);

{thr_table}\
/* per tree, {w} nodes of 4 bytes: bin index, threshold rank ({NEVER_RIGHT}: never right), \
left, right (>= {LEAF_BASE}: leaf child - {LEAF_BASE}) */
{c_array(f"{p}_nodes", "uint8_t", nodes, per_line=32)}\
/* per tree, {w + 1} leaf values */
{c_array(f"{p}_leaves", "double", leaves, per_line=4)}
/* bins[f] = bins[{nf} + f] = how many of feature f's thresholds are < x[f] (NaN: none), each
 * comparison counted, no branch; where x[f] is NaN, bins[{nf} + f] = 255 (a node reading it
 * goes right) */
static inline void {p}_bin(const double *x, uint8_t *bins) {{
    (void)x; /* a model without thresholds reads no input */
{"".join(binning)}}}

/* one level down from node i of a tree (a leaf, i >= {LEAF_BASE}, stays), no branch on the
 * data: right when the node's bin is above its threshold rank */
static inline uint32_t {p}_step(const uint8_t *n, uint32_t i, const uint8_t *bins) {{
    const uint8_t *d = n + 4 * (i & {LEAF_BASE - 1});
    const uint32_t right = -(uint32_t)(bins[d[0]] > d[1]);
    const uint32_t next = ((uint32_t)d[3] & right) | ((uint32_t)d[2] & ~right);
    const uint32_t leaf = -(i >> 7);
    return (i & leaf) | (next & ~leaf);
}}

/* the raw margin: the leaves added in tree order from 0.0, then the base score */
double {p}_margin(const double *x) {{
    uint8_t bins[{2 * nf}];
    {p}_bin(x, bins);
    double s = 0.0;
    for (int t = 0; t < {nt - nt % k}; t += {k}) {{ /* {k} trees at once */
{start}
        while (!(({done}) & {LEAF_BASE}u)) {{
{walk}
        }}
{adds}
    }}
{tail}    s += (double){c_hex(ct.base_score)};
    return s;
}}

/* the score: the margin through the postprocessor */
double {p}(const double *x) {{
    const double s = {p}_margin(x);
{post}}}

/* the prefetch hint (flashml_policy_prefetch): every table line and the first
 * {PREFETCH_CODE_BYTES} bytes of the code; no loads, no effect on scores */
void {p}_prefetch(void) {{
{prefetch}    const char *code = (const char *)(uintptr_t)&{p}_margin;
    for (int i = 0; i < {PREFETCH_CODE_BYTES}; i += 64) __builtin_prefetch(code + i);
}}
"""
