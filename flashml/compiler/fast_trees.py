"""A branch-free, exact evaluator for small-tree LightGBM ensembles, generated as C.

TL2cgen turns every tree into nested if/else: about one mispredicted branch per tree, so a
500-tree admission model costs ~7 us per row. This module emits a second evaluator for the
same Treelite model that takes no data-dependent branch at all, and that policy.so uses
where the CPU has AVX-512 VBMI (chosen once, at load time, by an ifunc resolver):

1. Binning. Every split compares a feature with one of that feature's thresholds. With the
   feature's distinct thresholds sorted, `x <= t_k` holds exactly when fewer than k+1 of
   them are below x, so each feature becomes one byte `bin = #{t : t < x}` (a branch-free
   binary search per feature, all features advanced in lockstep) and each split the
   integer test `bin > k` (go right).
2. Node outcomes. A tree's internal nodes (at most 64) sit in the 64 byte lanes of one
   vector: `vpermb` fetches each node's feature bin, `vpcmpub` compares all 64 against the
   split ranks, giving the go-right bit of every node at once.
3. Pointer jumping. `next[n]` is the child node n goes to (leaves, numbered 64..127, map
   to themselves). Squaring the map with `vpermt2b` K times (2^K >= depth) gives
   `next^(2^K)[root]`: the leaf.
   Small trees use narrower tables and share a vector: with at most 15 (31) internal nodes
   a tree takes 16 (32) lanes, so 4 (2) trees sit side by side in one 64-lane vector (tree j
   in lanes 16j.. (32j..), its node and leaf numbers shifted by as much) and one chain of
   permutes finds all their leaves (MAT's 32 trees x 32 leaves: 129 -> 98 ns a row).
4. The leaf values are added in tree order, starting from 0.0, then the base score and
   the postprocessor, exactly as TL2cgen and LightGBM do, so scores are bit-identical.

NaN inputs follow LightGBM's missing-value rules exactly, per split: a feature trained
without missing values (missing_type None) sends NaN where it sends 0.0, one trained with
them (missing_type NaN) sends NaN to the split's learned default side (Treelite's
default_left). When every split is of the first kind NaN is simply read as 0.0; otherwise
each feature has two bins, f and 64 + f, equal for a number; for NaN bin f is 0 (every
split goes left) and bin 64 + f is 255 (every split goes right), and a node that sends NaN
right reads bin 64 + f (`vpermt2b` over the 128 bins instead of `vpermb` over 64).
A NaN input skips the binning search: eviction rows are mostly missing past distances, and
the skip takes a MAT prediction (32 x 32) from 146 to 107 ns, the two bins to 98 ns (was a
NaN mask per tree and a third permute per group), blocks of 8 for features with 17-63
thresholds (two 8-wide compares instead of four) to 82 ns, interleaving the trees of a group
(`_packed`) to 80 ns (measured side by side on 65,536 tail candidates of a cdn-like trace,
all bit-identical).

`reference_margin` evaluates the same tables in numpy: tests use it to check the tables
and the binning on any CPU, and the C code where the CPU has the instructions.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Lanes of one 512-bit vector of bytes: internal nodes per tree, and leaves per tree.
LANES = 64
#: Table widths: the narrowest one that holds every tree's internal nodes (and leaves).
WIDTHS = (16, 32, 64)
#: Largest feature count the byte permute can index.
MAX_FEATURES = 64
#: Distinct thresholds per feature that still fit a byte-sized bin.
MAX_THRESHOLDS = 255
#: What the CPU must have for the generated evaluator (GCC/clang target names).
ISA = ("avx512f", "avx512bw", "avx512vbmi")
POSTPROCESSORS = ("identity", "sigmoid")
#: Most cache lines of tables one model's prefetch hint touches (64 KiB).
PREFETCH_MAX_LINES = 1024
#: Bytes of code from the evaluator's entry the hint prefetches (binning + tree loop).
PREFETCH_CODE_BYTES = 4096


@dataclass(frozen=True)
class FastTrees:
    """Tables of one ensemble in the evaluator's layout."""

    num_features: int
    thresholds: list[np.ndarray]  # per feature: sorted distinct float64 thresholds
    feat: np.ndarray   # uint8 [trees, width]: feature of each internal node
    rank: np.ndarray   # uint8 [trees, width]: index of its threshold (255 = never right)
    left: np.ndarray   # uint8 [trees, width]: next node when not going right
    right: np.ndarray  # uint8 [trees, width]: next node when going right
    leaf: np.ndarray   # float64 [trees, width]: value of leaf 64 + j
    doublings: int     # K: 2^K >= the deepest tree's depth
    base_score: float
    postprocessor: str
    sigmoid_alpha: float
    # uint64 [trees]: bit i set when internal node i sends a missing (NaN) value right. None
    # when every split sends NaN where it sends 0.0 (LightGBM's missing_type None): then NaN
    # is simply read as 0.0.
    nan_right: np.ndarray | None = None

    @property
    def num_trees(self) -> int:
        return int(self.feat.shape[0])

    @property
    def width(self) -> int:
        """Lanes per tree in the tables (WIDTHS): internal nodes are 0..width-1."""
        return int(self.feat.shape[1])

    @property
    def per_vector(self) -> int:
        """Trees sharing one 64-lane vector (a group): LANES // width."""
        return LANES // self.width

    @property
    def groups(self) -> int:
        """Groups of `per_vector` trees (the last may be partial)."""
        return -(-self.num_trees // self.per_vector)


def model_header(model: Any) -> dict[str, Any]:
    """A Treelite model's header fields (Treelite's JSON dump without the trees). Treelite
    writes non-finite numbers (a LightGBM split at +inf: NaN versus the rest) as nothing;
    they are read as null here, and trees are read through the tree accessor instead."""
    text = model.dump_as_json()
    try:
        head = json.loads(text)
    except json.JSONDecodeError:
        head = json.loads(_EMPTY_VALUE_RE.sub(r"\1null", text))
    head.pop("trees", None)
    return head


#: `"key": ,` (or before `}` / `]`): a value Treelite's JSON dump left empty.
_EMPTY_VALUE_RE = re.compile(r'("\s*:\s*)(?=[,}\]])')
#: Treelite's node types and its `<=` operator (tree accessor fields node_type, cmp).
LEAF, _NUMERICAL, _LE = 0, 1, 3


#: The tree accessor's fields an evaluator reads (node arrays indexed by node id, root 0).
TREE_FIELDS = ("node_type", "cmp", "threshold", "default_left", "split_index", "cleft",
               "cright", "leaf_value")


def header_refusal(head: dict[str, Any]) -> str | None:
    """Why an exact evaluator of one float64 output (identity or sigmoid) cannot take a
    model with this header (`model_header`), or None."""
    if head.get("average_tree_output"):
        return "averaged tree outputs (random forest mode)"
    if head.get("num_target", 1) != 1 or head.get("num_class", [1]) != [1]:
        return "more than one output"
    post = head.get("postprocessor")
    if post not in POSTPROCESSORS:
        return f"postprocessor {post}"
    if head.get("threshold_type") != "float64" or head.get("leaf_output_type") != "float64":
        return "thresholds or leaves are not float64"
    return None


def tree_arrays(model: Any) -> list[dict[str, np.ndarray]]:
    """Every tree's TREE_FIELDS, as NumPy arrays."""
    out = []
    for ti in range(int(model.num_tree)):
        acc = model.get_tree_accessor(ti)
        out.append({k: np.asarray(acc.get_field(k)) for k in TREE_FIELDS})
    return out


def split_refusal(trees: list[dict[str, np.ndarray]]) -> str | None:
    """Why an evaluator of numerical `<=` splits cannot take these trees, or None."""
    for t in trees:
        inner = t["node_type"] != LEAF
        if (t["node_type"][inner] != _NUMERICAL).any():
            return "categorical splits"
        cmp = t["cmp"][inner]
        if (cmp != _LE).any():
            return f"a split with comparison operator {int(cmp[cmp != _LE][0])} (not <=)"
    return None


def plan(model: Any) -> FastTrees | str:
    """FastTrees for a Treelite model, or the reason it cannot use the fast evaluator."""
    head = model_header(model)
    nf = int(head["num_feature"])
    if nf > MAX_FEATURES:
        return f"{nf} features (the evaluator indexes at most {MAX_FEATURES})"
    why = header_refusal(head)
    if why:
        return why
    post = head["postprocessor"]
    trees = tree_arrays(model)
    why = split_refusal(trees)
    if why:
        return why
    thr: list[set[float]] = [set() for _ in range(nf)]
    nan_default = False
    for t in trees:
        for i, kind in enumerate(t["node_type"]):
            if kind == LEAF:
                continue
            th = float(t["threshold"][i])
            if math.isnan(th):
                return "a NaN threshold"
            # LightGBM's missing_type None sends NaN where 0.0 goes (Treelite then sets
            # default_left = 0.0 <= t); missing_type NaN sends it the learned way.
            nan_default |= bool(t["default_left"][i]) != (0.0 <= th)
            thr[int(t["split_index"][i])].add(th)
    sorted_thr = [np.array(sorted(s), dtype=np.float64) for s in thr]
    for f, s in enumerate(sorted_thr):
        if len(s) > MAX_THRESHOLDS:
            return f"feature {f} has {len(s)} distinct thresholds (at most {MAX_THRESHOLDS})"
    rank_of = [{float(v): i for i, v in enumerate(s)} for s in sorted_thr]
    nt = len(trees)
    ident = np.arange(LANES, dtype=np.uint8)
    feat = np.zeros((nt, LANES), np.uint8)
    rank = np.full((nt, LANES), 255, np.uint8)
    left = np.tile(ident, (nt, 1))
    right = np.tile(ident, (nt, 1))
    leaf = np.zeros((nt, LANES), np.float64)
    nan_right = np.zeros(nt, np.uint64)
    depth_max = 1
    internal_max = 1
    for ti, t in enumerate(trees):
        kinds = t["node_type"]
        internal = int(np.count_nonzero(kinds != LEAF))
        if internal > LANES - 1 or len(kinds) - internal > LANES:
            return f"tree {ti} has {len(kinds) - internal} leaves (at most {LANES})"
        internal_max = max(internal_max, internal)
        counters = [0, 0]  # internal nodes, leaves numbered so far

        def visit(nid: int, depth: int, ti: int = ti, t: dict = t,
                  counters: list[int] = counters) -> tuple[int, int]:
            if t["node_type"][nid] == LEAF:
                j = counters[1]
                counters[1] += 1
                leaf[ti, j] = float(t["leaf_value"][nid])
                return LANES + j, depth
            i = counters[0]
            counters[0] += 1
            f = int(t["split_index"][nid])
            feat[ti, i] = f
            rank[ti, i] = rank_of[f][float(t["threshold"][nid])]
            if not t["default_left"][nid]:
                nan_right[ti] |= np.uint64(1) << np.uint64(i)
            left[ti, i], dl = visit(int(t["cleft"][nid]), depth + 1)
            right[ti, i], dr = visit(int(t["cright"][nid]), depth + 1)
            return i, max(dl, dr)

        root, depth = visit(0, 0)  # Treelite numbers the root 0
        if root >= LANES:  # a one-leaf tree: lane 0 leads to it either way
            left[ti, 0] = right[ti, 0] = root
            depth = 1
        depth_max = max(depth_max, depth)
    base = head.get("base_scores", [0.0])
    # lanes at or above the width are never reached: nodes lead to internal nodes below
    # the tree's count or to leaves 64 + j, j < count + 1 <= width
    w = next(w for w in WIDTHS if internal_max <= w - 1)
    feat, rank, left, right, leaf = (a[:, :w].copy() for a in (feat, rank, left, right, leaf))
    return FastTrees(num_features=nf, thresholds=sorted_thr, feat=feat, rank=rank, left=left,
                     right=right, leaf=leaf,
                     doublings=max(0, math.ceil(math.log2(depth_max))),
                     base_score=float(base[0]), postprocessor=post,
                     sigmoid_alpha=float(head.get("sigmoid_alpha", 1.0)),
                     nan_right=nan_right if nan_default else None)


def cpu_has_fast_trees() -> bool:
    """Whether this machine's CPU has ISA (Linux /proc/cpuinfo flags); policy.so decides
    for itself at load time, this tells tests and benchmarks which path it will take."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return all(f in flags for f in ISA)
    return False


def _bins(ft: FastTrees, x: np.ndarray) -> np.ndarray:
    x = np.where(np.isnan(x), 0.0, x)
    out = np.zeros((x.shape[0], LANES), np.int64)
    for f, t in enumerate(ft.thresholds):
        out[:, f] = np.searchsorted(t, x[:, f], side="left")  # thresholds strictly below
    return out


def reference_margin(ft: FastTrees, x: np.ndarray) -> np.ndarray:
    """The raw score (sum of leaves + base score) of each row of x, from the tables."""
    x = np.asarray(x, dtype=np.float64)
    bins = _bins(ft, x)
    rows = np.arange(x.shape[0])
    s = np.zeros(x.shape[0], np.float64)
    isnan = np.isnan(x)
    for t in range(ft.num_trees):
        go_right = bins[:, ft.feat[t]] > ft.rank[t][None, :].astype(np.int64)
        if ft.nan_right is not None:
            lanes = np.arange(ft.width, dtype=np.uint64)
            bits = ((np.uint64(ft.nan_right[t]) >> lanes) & np.uint64(1)).astype(bool)
            missing = isnan[:, ft.feat[t]]
            go_right = np.where(missing, bits[None, :], go_right)
        nxt = np.where(go_right, ft.right[t][None, :], ft.left[t][None, :]).astype(np.int64)
        node = np.zeros(x.shape[0], np.int64)
        while True:
            inner = node < LANES
            if not inner.any():
                break
            node[inner] = nxt[rows[inner], node[inner]]
        s = s + ft.leaf[t][node - LANES]
    return s + ft.base_score


def c_array(name: str, ctype: str, values: list[str], per_line: int = 16) -> str:
    """A static, 64-byte aligned C array `name` of `values` (C literals)."""
    lines = [", ".join(values[i:i + per_line]) for i in range(0, len(values), per_line)]
    body = ",\n    ".join(lines) if lines else "0"
    return (f"static const {ctype} {name}[{max(len(values), 1)}] "
            f"__attribute__((aligned(64))) = {{\n    {body}\n}};\n")


def c_hex(v: float) -> str:
    """`v` as an exact C double literal (hex float; INFINITY for infinities)."""
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return float(v).hex()


def emit_c(ft: FastTrees, symbol: str) -> str:
    """C source defining `double <symbol>(const double *x)`: the model's score (with its
    postprocessor) for one row x in the model's feature order. The function carries the
    AVX-512 target attribute: call it only where the CPU has ISA (see policy_wrapper.c.in).
    Everything else in the file is static."""
    p = symbol
    nan_mode = ft.nan_right is not None
    # Per feature: its sorted distinct thresholds padded with +inf to 8, 16, 64 or 256
    # values. Up to 16 are counted with one or two 8-wide compares; more take two levels:
    # "splitters" pick the block that holds the answer, up to 63 the 8 splitters t[7], t[15],
    # ..., t[63] (+inf) a block of 8, more the 16 splitters t[15], ..., t[255] a block of 16.
    thr_flat: list[float] = []
    split_flat: list[float] = []
    code: list[str] = []
    for f, t in enumerate(ft.thresholds):
        n = len(t)
        if n == 0:
            continue
        size = 8 if n <= 8 else 16 if n <= 16 else 64 if n <= 63 else 256
        off = len(thr_flat)
        padded = [float(v) for v in t] + [math.inf] * (size - n)
        thr_flat += padded
        # A NaN input takes no search: its bins are constants. Without NaN mode it reads
        # as 0.0; in NaN mode bins[f] (read by nodes that send NaN left) is 0 and
        # bins[64 + f] (read by those that send it right) 255, above every rank. Eviction
        # rows are mostly missing past distances (a once-seen object has none): about half
        # their features skip the search.
        if nan_mode:
            on_nan = f"bins[{f}] = 0; bins[{LANES + f}] = 255;"
        else:
            nan_bin = int(np.searchsorted(t, 0.0, side="left"))
            on_nan = f"bins[{f}] = {nan_bin};" if nan_bin else ";"
        code.append(f"    if (x[{f}] != x[{f}]) {{ /* feature {f}: {n} thresholds */\n"
                    f"        {on_nan}\n"
                    f"    }} else {{\n"
                    f"        const __m512d v = _mm512_set1_pd(x[{f}]);\n")
        if size == 8:
            b = f"below8({p}_thr + {off}, v)"
        elif size == 16:
            b = f"below16({p}_thr + {off}, v)"
        else:  # two levels: blocks of 8 (size 64) or 16 (size 256)
            step = 8 if size == 64 else 16
            below = f"below{step}"
            soff = len(split_flat)
            split_flat += padded[step - 1::step]
            code.append(f"        const int block = {below}({p}_split + {soff}, v);\n")
            b = f"{step} * block + {below}({p}_thr + {off} + {step} * block, v)"
        store = f"bins[{f}] = bins[{LANES + f}]" if nan_mode else f"bins[{f}]"
        code.append(f"        {store} = (uint8_t)({b});\n    }}\n")
    per, groups = ft.per_vector, ft.groups
    tree, leaf = _packed(ft)
    nan_doc = ("; bins[64 + f] the same; where x[f] is NaN, bins[f] = 0 (nodes that send "
               "NaN left read it) and bins[64 + f] = 255 (those that send it right)"
               if nan_mode else " (NaN read as 0.0)")
    load = "_mm512_load_si512((const void *)({}))"
    out = [
        f"/* GENERATED by flashml.compiler.fast_trees: {ft.num_trees} trees, "
        f"{ft.num_features} features, K={ft.doublings}; do not edit. */\n",
        "#include <math.h>\n#include <stdint.h>\n#include <immintrin.h>\n\n",
        f"#define FT_TARGET __attribute__((target(\"{','.join(ISA)}\")))\n\n",
        f"double {p}_margin(const double *x);\ndouble {p}(const double *x);\n"
        f"void {p}_prefetch(void);\n\n",
        ("/* per feature: its sorted distinct thresholds, padded with +inf */\n"
         + c_array(f"{p}_thr", "double", [c_hex(v) for v in thr_flat], per_line=4)
         if thr_flat else ""),
        ("/* features with more than 16 thresholds: every 8th (up to 63: t[7], t[15], ...) or "
         "16th (t[15], t[31], ...) */\n"
         + c_array(f"{p}_split", "double", [c_hex(v) for v in split_flat], per_line=4)
         if split_flat else ""),
        f"/* per group of {per} tree(s) (tree j's node i in lane {per}i + j, its leaf l "
        f"numbered 64 + {per}l + j), 4 x 64 bytes: node feature, threshold rank, left next, "
        "right next */\n",
        c_array(f"{p}_tree", "uint8_t", [str(int(v)) for v in tree], per_line=32),
        "/* per group, 64 leaf values (leaf 64 + m at m) */\n",
        c_array(f"{p}_leaf", "double", [c_hex(v) for v in leaf], per_line=4),
        f"""
/* how many of the 8 (16) sorted values at t are < v (every lane holds v) */
FT_TARGET static inline int {p}_below8(const double *t, __m512d v) {{
    return __builtin_popcount(_mm512_cmp_pd_mask(_mm512_loadu_pd(t), v, _CMP_LT_OQ));
}}
FT_TARGET static inline int {p}_below16(const double *t, __m512d v) {{
    return {p}_below8(t, v) + {p}_below8(t + 8, v);
}}
#define below8 {p}_below8
#define below16 {p}_below16

/* bins[f] = how many of feature f's thresholds are < x[f]{nan_doc} */
FT_TARGET static inline void {p}_bin(const double *x, uint8_t *bins) {{
    (void)x;
    (void)bins;
""",
        *code,
        "}\n#undef below8\n#undef below16\n\n",
    ]
    ident_hi = ", ".join(str(i) for i in range(2 * LANES - 1, LANES - 1, -1))
    if nan_mode:  # node features index 128 bins: 64 + f for nodes that send NaN right
        nbins = 2 * LANES
        bins_load = ("const __m512i bv = _mm512_load_si512((const void *)bins);\n"
                     "    const __m512i bv2 = _mm512_load_si512((const void *)(bins + 64));")
        node_bins = "_mm512_permutex2var_epi8(bv, feat, bv2)"
    else:
        nbins = LANES
        bins_load = "const __m512i bv = _mm512_load_si512((const void *)bins);"
        node_bins = "_mm512_permutexvar_epi8(feat, bv)"
    if ft.postprocessor == "sigmoid":
        post = (f"    return (double)(1) / ((double)(1) + exp(-(double){c_hex(ft.sigmoid_alpha)}"
                f" * s));\n")
    else:
        post = "    return s;\n"
    out.append(f"""/* the raw margin: leaves summed in tree order, plus the base score */
FT_TARGET double {p}_margin(const double *x) {{
    uint8_t bins[{nbins}] __attribute__((aligned(64))) = {{0}};
    {p}_bin(x, bins);
    {bins_load}
    const __m512i leaves = _mm512_set_epi8({ident_hi});
    const uint8_t *t = {p}_tree;
    double s = 0.0;
    for (int g = 0; g < {groups}; ++g, t += 256) {{
        const __m512i feat = {load.format("t")};
        const __m512i rank = {load.format("t + 64")};
        const __m512i l = {load.format("t + 128")};
        const __m512i r = {load.format("t + 192")};
        const __mmask64 go_right = _mm512_cmpgt_epu8_mask({node_bins}, rank);
        __m512i next = _mm512_mask_blend_epi8(go_right, l, r);
        for (int k = 0; k < {ft.doublings}; ++k) {{
            next = _mm512_permutex2var_epi8(next, next, leaves);
        }}
        /* lane j holds tree j's leaf, 64 + m: its value is at m; the leaves are added in
         * tree order */
{_emit_leaf_adds(p, per, ft.num_trees, groups)}    }}
    s += (double){c_hex(ft.base_score)};
    return s;
}}

/* the score: the margin through the postprocessor */
FT_TARGET double {p}(const double *x) {{
    const double s = {p}_margin(x);
{post}}}
""")
    out.append(_emit_prefetch(ft, p, len(thr_flat), len(split_flat)))
    return "".join(out)


def _packed(ft: FastTrees) -> tuple[np.ndarray, np.ndarray]:
    """The trees' tables in groups of P = LANES // width trees, one 64-lane vector per table
    and group, the P trees interleaved: tree j's internal node i in lane P*i + j, its leaf l
    numbered 64 + P*l + j (lanes of missing trees in the last group are leaves pointing at
    themselves); and the leaf values by group, leaf 64 + m at m: (uint8 [groups * 4 * 64],
    float64 [groups * 64]). The P roots sit in lanes 0..P-1, so one 32-bit move takes all P
    leaves at the end. In NaN mode a node that sends NaN right reads feature f's second bin,
    64 + f (see emit_c). Evaluating P trees with one chain of permutes instead of P halves
    the tree loop for 32-lane trees (the module doc's figures)."""
    w, n, per, groups = ft.width, ft.num_trees, ft.per_vector, ft.groups
    tabs = np.zeros((groups, 4, LANES), dtype=np.uint8)
    # unused lanes: leaves pointing at themselves (node 64 + lane), never read
    tabs[:, 2, :] = tabs[:, 3, :] = LANES + np.arange(LANES, dtype=np.uint8)
    leaves = np.zeros((groups, LANES), dtype=np.float64)
    lanes = np.arange(w, dtype=np.uint64)

    def shifted(nodes: np.ndarray, j: int) -> np.ndarray:
        v = nodes.astype(np.int64)
        return np.where(v < LANES, per * v + j, LANES + per * (v - LANES) + j)

    for i in range(n):
        g, j = divmod(i, per)
        at = per * np.arange(w) + j
        feat = ft.feat[i].astype(np.uint16)
        if ft.nan_right is not None:
            right = (np.uint64(ft.nan_right[i]) >> lanes) & np.uint64(1)
            feat = feat + LANES * right.astype(np.uint16)
        tabs[g, 0, at] = feat
        tabs[g, 1, at] = ft.rank[i]
        tabs[g, 2, at] = shifted(ft.left[i], j)
        tabs[g, 3, at] = shifted(ft.right[i], j)
        leaves[g, at] = ft.leaf[i]
    return tabs.reshape(-1), leaves.reshape(-1)


def _emit_leaf_adds(p: str, per: int, trees: int, groups: int) -> str:
    """The group loop's leaf additions, in tree order (the last group may be partial): tree
    j's leaf, 64 + m, is in byte j of `next`, its value at leaf[g * 64 + m]."""
    full = trees - (groups - 1) * per
    lines = ["        const uint32_t b = (uint32_t)_mm_cvtsi128_si32("
             "_mm512_castsi512_si128(next));\n"]
    for j in range(per):
        add = f"s += {p}_leaf[g * 64 + ((b >> {8 * j}) & 63)];"
        if j < full:
            lines.append(f"        {add}\n")
        else:  # tree j of the last group does not exist
            lines.append(f"        if (g < {groups - 1}) {add}\n")
    return "".join(lines)


def _emit_prefetch(ft: FastTrees, p: str, n_thr: int, n_split: int) -> str:
    """`void <p>_prefetch(void)`: prefetch instructions for what `<p>` reads on every call
    (its thresholds, tree tables, the leaf lines in use, its code), at most
    PREFETCH_MAX_LINES lines of tables, earliest trees first."""
    per, groups = ft.per_vector, ft.groups
    leaves = max(1, int(max(ft.left.max(), ft.right.max())) - LANES + 1)  # leaf ids: 64 + j
    leaf_lines = -(-min(per * leaves, LANES) // 8)  # per group: leaf 64 + m at m
    budget = PREFETCH_MAX_LINES - (n_thr + 7) // 8 - (n_split + 7) // 8
    pref = max(0, min(groups, budget // (4 + leaf_lines)))
    body = []
    if n_thr:
        body.append(f"    for (int i = 0; i < {n_thr}; i += 8) __builtin_prefetch({p}_thr + i);")
    if n_split:
        body.append(f"    for (int i = 0; i < {n_split}; i += 8) "
                    f"__builtin_prefetch({p}_split + i);")
    body.append(f"""    for (int g = 0; g < {pref}; ++g) {{
        for (int j = 0; j < 256; j += 64) __builtin_prefetch({p}_tree + g * 256 + j);
        for (int j = 0; j < {leaf_lines * 8}; j += 8) __builtin_prefetch({p}_leaf + g * 64 + j);
    }}
    const char *code = (const char *)(uintptr_t)&{p}_margin;
    for (int i = 0; i < {PREFETCH_CODE_BYTES}; i += 64) __builtin_prefetch(code + i);""")
    return (f"\n/* the prefetch hint of {p} (flashml_policy_prefetch): no loads, no effect on "
            f"scores */\nvoid {p}_prefetch(void) {{\n" + "\n".join(body) + "\n}\n")
