//! Exact batch scoring of a gradient-boosted tree ensemble (LightGBM's, read through
//! Treelite's tree accessor in `flashml/models/forest.py`): the training loop scores every
//! access of a trace with each new model, and LightGBM's own `Booster.predict` spent 65% of
//! the main job there at 1 M accesses (~11 us per row for a 500-tree model, 2 threads).
//!
//! Why our own code and not a library: the scores must equal LightGBM's bit for bit (the
//! simulator's decisions, the tuned thresholds and the compiled policy.so all agree on them),
//! and none of the Rust GBDT crates promises that; the compiled policy.so needs a C compiler
//! and seconds per model, too slow to build once per training iteration.
//!
//! How it is exact: a value with |x| <= 1e-35 is read as 0.0, as LightGBM's predictor reads
//! it; a split `x <= t` is decided on ranks, not doubles. Each feature's distinct
//! thresholds are sorted once; a row's value becomes `bin = #{t : t < x}` (a binary search);
//! then `x <= t_k` holds exactly when `bin <= k`. NaN takes the split's default side
//! (Treelite's `default_left`: LightGBM's learned side, or where 0.0 goes for its missing type
//! None). The leaves are summed in tree order from 0.0, the base score is added when it is not
//! zero, and the sigmoid is LightGBM's `1 / (1 + exp(-alpha * x))`: the same operations as
//! LightGBM's `PredictRaw` and `ConvertOutput`, so the same doubles.
//!
//! How it is fast: rows are binned once per block (u16 per feature) and blocks of rows are
//! shared among threads. Where the CPU has AVX-512 VBMI and the trees fit 64 byte lanes,
//! every tree is evaluated as compiler/fast_trees.py's policy.so does (`vbmi` below: no
//! data-dependent branch); else each tree walks a group of 8 rows in lockstep (independent
//! loads the CPU overlaps; leaves point to themselves, so a group stops when all its rows sit
//! on leaves). Measured on the 1 M-access job's four models: 7-20x `Booster.predict`.

use std::fmt;

/// LightGBM's `kZeroThreshold` (`1e-35f`, a float widened to double): its predictor drops
/// every input value with |x| <= it from the row (c_api.cpp, RowPairFunctionFromDenseMatric),
/// so such a value is read as 0.0.
const ZERO_THRESHOLD: f64 = 1e-35f32 as f64;
/// The bin of a missing (NaN) value.
const NAN_BIN: u16 = u16::MAX;
/// Rows walked in lockstep.
const GROUP: usize = 8;
/// Rows binned and scored at a time (their bins stay in L1/L2 while every tree passes).
const BLOCK: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForestError(pub String);

impl fmt::Display for ForestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ForestError {}

fn err<T>(msg: String) -> Result<T, ForestError> {
    Err(ForestError(msg))
}

/// 12 bytes: a tree's nodes fit a few cache lines.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Node {
    left: u32,
    right: u32,
    /// The model feature (low 15 bits; the caller's column map applied at binning) and, in
    /// the top bit, whether a missing value goes left.
    feat_nan: u16,
    /// Go left when the row's bin is <= rank (u16::MAX at a leaf, whose children are itself:
    /// every bin, NaN's too, stays there).
    rank: u16,
}

const NAN_LEFT: u16 = 1 << 15;

/// One tree as Treelite's accessor gives it: node arrays indexed by node id, the root at 0.
pub struct TreeArrays<'a> {
    /// True at a leaf.
    pub is_leaf: &'a [bool],
    pub split_feature: &'a [u32],
    pub threshold: &'a [f64],
    pub default_left: &'a [bool],
    pub left: &'a [i32],
    pub right: &'a [i32],
    pub leaf_value: &'a [f64],
}

#[derive(Debug)]
pub struct Forest {
    /// Model feature i is row column cols[i].
    cols: Vec<usize>,
    /// Per model feature: its distinct split thresholds, sorted.
    thresholds: Vec<Vec<f64>>,
    nodes: Vec<Node>,
    /// Leaf value per node (0 at internal nodes).
    value: Vec<f64>,
    roots: Vec<u32>,
    base_score: f64,
    sigmoid_alpha: Option<f64>,
    /// The byte-vector tables (AVX-512 VBMI), when the model fits them.
    #[cfg(target_arch = "x86_64")]
    vector: Option<vbmi::Tables>,
}

impl Forest {
    /// `trees` in Treelite's numbering; `n_features` the model's feature count; `sigmoid_alpha`
    /// Some(alpha) for a binary model's probability, None for the raw score (regression).
    pub fn new(
        trees: &[TreeArrays<'_>],
        n_features: usize,
        base_score: f64,
        sigmoid_alpha: Option<f64>,
    ) -> Result<Forest, ForestError> {
        if n_features == 0 || n_features >= NAN_LEFT as usize {
            return err(format!("{n_features} features: 1..32767 supported"));
        }
        let mut thr: Vec<Vec<f64>> = vec![Vec::new(); n_features];
        for (ti, t) in trees.iter().enumerate() {
            let n = t.is_leaf.len();
            if n == 0 {
                return err(format!("tree {ti} has no nodes"));
            }
            for (name, len) in [
                ("split_feature", t.split_feature.len()),
                ("threshold", t.threshold.len()),
                ("default_left", t.default_left.len()),
                ("left", t.left.len()),
                ("right", t.right.len()),
                ("leaf_value", t.leaf_value.len()),
            ] {
                if len != n {
                    return err(format!("tree {ti}: {name} has {len} entries, not {n}"));
                }
            }
            for i in 0..n {
                if t.is_leaf[i] {
                    continue;
                }
                let f = t.split_feature[i] as usize;
                if f >= n_features {
                    return err(format!("tree {ti} node {i}: feature {f} of {n_features}"));
                }
                let th = t.threshold[i];
                if th.is_nan() {
                    return err(format!("tree {ti} node {i}: a NaN threshold"));
                }
                thr[f].push(th);
            }
        }
        for t in thr.iter_mut() {
            t.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
            t.dedup();
            if t.len() >= NAN_BIN as usize {
                return err(format!("{} distinct thresholds on one feature", t.len()));
            }
        }
        let mut nodes = Vec::new();
        let mut value = Vec::new();
        let mut roots = Vec::with_capacity(trees.len());
        for (ti, t) in trees.iter().enumerate() {
            let base = nodes.len();
            let n = t.is_leaf.len();
            if base + n > u32::MAX as usize {
                return err("more than 2^32 nodes".into());
            }
            roots.push(base as u32);
            for i in 0..n {
                let child = |c: i32, side: &str| -> Result<u32, ForestError> {
                    if c <= 0 || c as usize >= n {
                        return err(format!("tree {ti} node {i}: {side} child {c} of {n} nodes"));
                    }
                    Ok((base + c as usize) as u32)
                };
                if t.is_leaf[i] {
                    let me = (base + i) as u32;
                    nodes.push(Node {
                        left: me,
                        right: me,
                        feat_nan: 0,
                        rank: u16::MAX,
                    });
                    value.push(t.leaf_value[i]);
                } else {
                    let f = t.split_feature[i] as usize;
                    let rank = thr[f]
                        .binary_search_by(|x| x.partial_cmp(&t.threshold[i]).expect("no NaN"))
                        .expect("every threshold is listed");
                    nodes.push(Node {
                        left: child(t.left[i], "left")?,
                        right: child(t.right[i], "right")?,
                        feat_nan: f as u16 | if t.default_left[i] { NAN_LEFT } else { 0 },
                        rank: rank as u16,
                    });
                    value.push(0.0);
                }
            }
        }
        let mut f = Forest {
            cols: (0..n_features).collect(),
            thresholds: thr,
            nodes,
            value,
            roots,
            base_score,
            sigmoid_alpha,
            #[cfg(target_arch = "x86_64")]
            vector: None,
        };
        #[cfg(target_arch = "x86_64")]
        {
            f.vector = vbmi::Tables::new(&f);
        }
        Ok(f)
    }

    pub fn num_features(&self) -> usize {
        self.thresholds.len()
    }

    pub fn num_trees(&self) -> usize {
        self.roots.len()
    }

    /// Whether `predict(.., vector: true)` uses the byte-vector evaluator (the model fits its
    /// tables and the CPU has AVX-512 VBMI); else it walks the trees one node at a time. Both
    /// give the same doubles (tests compare them).
    pub fn vectorised(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.vector.is_some() && vbmi::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Model feature i read from row column `cols[i]` (default: column i).
    pub fn with_columns(mut self, cols: Vec<usize>) -> Result<Forest, ForestError> {
        if cols.len() != self.num_features() {
            return err(format!(
                "{} columns for a model of {} features",
                cols.len(),
                self.num_features()
            ));
        }
        self.cols = cols;
        Ok(self)
    }

    #[inline]
    fn bin(&self, f: usize, x: f64) -> u16 {
        if x.is_nan() {
            NAN_BIN
        } else {
            let x = if x.abs() <= ZERO_THRESHOLD { 0.0 } else { x };
            self.thresholds[f].partition_point(|&t| t < x) as u16
        }
    }

    /// The node after `n` for the row whose bins start at `bins[at]`.
    #[inline(always)]
    fn step(&self, n: u32, bins: &[u16], at: usize) -> u32 {
        // SAFETY: `n` is a node index (roots and children are checked in `new`), and `at` +
        // a model feature is within `bins` (score_block binned every feature of the row).
        let node = unsafe { *self.nodes.get_unchecked(n as usize) };
        let b = unsafe { *bins.get_unchecked(at + (node.feat_nan & !NAN_LEFT) as usize) };
        let left = (b <= node.rank) | ((b == NAN_BIN) & (node.feat_nan & NAN_LEFT != 0));
        if left {
            node.left
        } else {
            node.right
        }
    }

    /// Leaf values of the `K` rows from `g`, walked through one tree in lockstep, added to
    /// `out`.
    #[inline(always)]
    fn walk<const K: usize>(&self, root: u32, bins: &[u16], nf: usize, g: usize, out: &mut [f64]) {
        let mut at = [root; K];
        loop {
            let mut moved = false;
            for (j, a) in at.iter_mut().enumerate() {
                let n = self.step(*a, bins, (g + j) * nf);
                moved |= n != *a;
                *a = n;
            }
            if !moved {
                break;
            }
        }
        for (o, a) in out[g..g + K].iter_mut().zip(at) {
            *o += self.value[a as usize];
        }
    }

    /// Scores of `rows` rows of `width` columns (row-major) into `out`.
    fn score_block(
        &self,
        x: &[f64],
        width: usize,
        out: &mut [f64],
        bins: &mut Vec<u16>,
        vector: bool,
    ) {
        let rows = out.len();
        let nf = self.num_features();
        bins.clear();
        bins.reserve(rows * nf);
        for r in 0..rows {
            let row = &x[r * width..(r + 1) * width];
            for (f, &c) in self.cols.iter().enumerate() {
                bins.push(self.bin(f, row[c]));
            }
        }
        out.iter_mut().for_each(|v| *v = 0.0);
        #[cfg(target_arch = "x86_64")]
        if vector && self.vectorised() {
            let t = self.vector.as_ref().expect("vectorised");
            // SAFETY: vectorised() checked that the CPU has AVX-512 F, BW and VBMI.
            unsafe { t.score(bins, nf, out) };
            // rows with a missing value: the scalar walk (their NaN bins are not bytes)
            for r in 0..rows {
                if bins[r * nf..(r + 1) * nf].contains(&NAN_BIN) {
                    out[r] = 0.0;
                    for &root in &self.roots {
                        self.walk::<1>(root, bins, nf, r, out);
                    }
                }
            }
            return self.finish(out);
        }
        for &root in &self.roots {
            let mut g = 0;
            while g + GROUP <= rows {
                self.walk::<GROUP>(root, bins, nf, g, out);
                g += GROUP;
            }
            while g < rows {
                self.walk::<1>(root, bins, nf, g, out);
                g += 1;
            }
        }
        self.finish(out);
    }

    /// The base score and the postprocessor, in LightGBM's order.
    fn finish(&self, out: &mut [f64]) {
        if self.base_score != 0.0 {
            out.iter_mut().for_each(|v| *v += self.base_score);
        }
        if let Some(alpha) = self.sigmoid_alpha {
            out.iter_mut()
                .for_each(|v| *v = 1.0 / (1.0 + (-alpha * *v).exp()));
        }
    }

    /// The model's output for each row of `x` (row-major, `width` columns), on `threads`
    /// threads (blocks of rows; the result does not depend on the count), by the byte-vector
    /// evaluator where `vector` and `vectorised()`.
    pub fn predict(
        &self,
        x: &[f64],
        width: usize,
        threads: usize,
        vector: bool,
    ) -> Result<Vec<f64>, ForestError> {
        if width == 0 || !x.len().is_multiple_of(width) {
            return err(format!(
                "{} values are not rows of {width} columns",
                x.len()
            ));
        }
        if let Some(&c) = self.cols.iter().find(|&&c| c >= width) {
            return err(format!("column {c} of rows with {width} columns"));
        }
        let rows = x.len() / width;
        let mut out = vec![0.0; rows];
        let threads = threads.max(1).min(rows.div_ceil(BLOCK).max(1));
        let per = rows.div_ceil(threads).div_ceil(BLOCK) * BLOCK;
        std::thread::scope(|s| {
            for (i, chunk) in out.chunks_mut(per.max(1)).enumerate() {
                let start = i * per;
                s.spawn(move || {
                    let mut bins = Vec::new();
                    for (b, o) in chunk.chunks_mut(BLOCK).enumerate() {
                        let r0 = start + b * BLOCK;
                        self.score_block(
                            &x[r0 * width..(r0 + o.len()) * width],
                            width,
                            o,
                            &mut bins,
                            vector,
                        );
                    }
                });
            }
        });
        Ok(out)
    }
}

/// The byte-vector evaluator (compiler/fast_trees.py's algorithm, here in Rust): a tree's
/// internal nodes (at most 64) sit in the 64 byte lanes of one vector; `vpermb` fetches each
/// node's feature bin, `vpcmpub` compares all 64 with their ranks at once, a blend gives each
/// node's next node, and squaring that map K times (2^K >= the tree's depth; leaves, 64..127,
/// map to themselves) takes the root to its leaf. No data-dependent branch; ~1.5 ns per tree
/// and row where the C version was measured (bench/results/compile.json).
#[cfg(target_arch = "x86_64")]
mod vbmi {
    use super::{Forest, NAN_BIN};
    use std::arch::x86_64::*;

    const LANES: usize = 64;

    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
    }

    #[derive(Debug)]
    pub struct Tables {
        feat: Vec<[u8; LANES]>,
        rank: Vec<[u8; LANES]>,
        left: Vec<[u8; LANES]>,
        right: Vec<[u8; LANES]>,
        leaf: Vec<[f64; LANES]>,
        doublings: Vec<u8>,
    }

    impl Tables {
        /// The tables of `f`, or None when a tree has more than 64 internal nodes or leaves,
        /// the model more than 64 features, or a feature more than 255 thresholds.
        pub fn new(f: &Forest) -> Option<Tables> {
            if f.num_features() > LANES || f.thresholds.iter().any(|t| t.len() > 255) {
                return None;
            }
            let n = f.roots.len();
            let mut t = Tables {
                feat: vec![[0; LANES]; n],
                rank: vec![[255; LANES]; n],
                left: vec![[LANES as u8; LANES]; n],
                right: vec![[LANES as u8; LANES]; n],
                leaf: vec![[0.0; LANES]; n],
                doublings: vec![0; n],
            };
            for (ti, &root) in f.roots.iter().enumerate() {
                // depth-first from the root: internal nodes 0.., leaves 64..
                let (mut inner, mut leaves, mut depth) = (0usize, 0usize, 0usize);
                let mut stack = vec![(root, 0usize, None::<(usize, bool)>)];
                while let Some((g, d, parent)) = stack.pop() {
                    let node = f.nodes[g as usize];
                    let is_leaf = node.left == g && node.right == g;
                    let lane = if is_leaf {
                        if leaves == LANES {
                            return None;
                        }
                        t.leaf[ti][leaves] = f.value[g as usize];
                        leaves += 1;
                        depth = depth.max(d);
                        LANES + leaves - 1
                    } else {
                        if inner == LANES {
                            return None;
                        }
                        t.feat[ti][inner] = (node.feat_nan & !super::NAN_LEFT) as u8;
                        t.rank[ti][inner] = node.rank as u8;
                        inner += 1;
                        stack.push((node.right, d + 1, Some((inner - 1, true))));
                        stack.push((node.left, d + 1, Some((inner - 1, false))));
                        inner - 1
                    };
                    // (a one-leaf tree has no parent: lane 0's children are leaf 0 already)
                    if let Some((p, right)) = parent {
                        if right {
                            t.right[ti][p] = lane as u8;
                        } else {
                            t.left[ti][p] = lane as u8;
                        }
                    }
                }
                // next() is one step; each squaring doubles the steps: 2^K >= depth
                let mut k = 0;
                while (1usize << k) < depth {
                    k += 1;
                }
                t.doublings[ti] = k;
            }
            Some(t)
        }

        /// Adds every tree's leaf value, in tree order, to `out[r]` for each row (bins
        /// `bins[r * nf..]`; a NaN bin reads as 255 here: the caller redoes those rows).
        ///
        /// # Safety
        /// The CPU must have AVX-512 F, BW and VBMI (`available()`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
        pub unsafe fn score(&self, bins: &[u16], nf: usize, out: &mut [f64]) {
            let rows = out.len();
            let mut b8 = vec![0u8; rows * LANES];
            for r in 0..rows {
                for f in 0..nf {
                    let b = bins[r * nf + f];
                    b8[r * LANES + f] = if b == NAN_BIN { 255 } else { b as u8 };
                }
            }
            let ident = _mm512_loadu_si512(IDENT_HI.as_ptr() as *const __m512i);
            for ti in 0..self.feat.len() {
                let feat = _mm512_loadu_si512(self.feat[ti].as_ptr() as *const __m512i);
                let rank = _mm512_loadu_si512(self.rank[ti].as_ptr() as *const __m512i);
                let left = _mm512_loadu_si512(self.left[ti].as_ptr() as *const __m512i);
                let right = _mm512_loadu_si512(self.right[ti].as_ptr() as *const __m512i);
                let leaf = &self.leaf[ti];
                let k = self.doublings[ti];
                for (r, o) in out.iter_mut().enumerate() {
                    let row = _mm512_loadu_si512(b8.as_ptr().add(r * LANES) as *const __m512i);
                    let nb = _mm512_permutexvar_epi8(feat, row);
                    let go_right = _mm512_cmpgt_epu8_mask(nb, rank);
                    let mut cur = _mm512_mask_blend_epi8(go_right, left, right);
                    for _ in 0..k {
                        cur = _mm512_permutex2var_epi8(cur, cur, ident);
                    }
                    let lane = (_mm_cvtsi128_si32(_mm512_castsi512_si128(cur)) & 0xff) as usize;
                    *o += *leaf.get_unchecked(lane - LANES);
                }
            }
        }
    }

    /// Bytes 64..127: the leaves' lanes of the 128-entry map, each mapping to itself.
    static IDENT_HI: [u8; LANES] = {
        let mut a = [0u8; LANES];
        let mut i = 0;
        while i < LANES {
            a[i] = (LANES + i) as u8;
            i += 1;
        }
        a
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x0 <= 1.5 ? (x1 <= 0.0 ? 1 : 2) : 3, NaN of x0 right, of x1 left.
    fn small() -> Forest {
        let t = TreeArrays {
            is_leaf: &[false, false, true, true, true],
            split_feature: &[0, 1, 0, 0, 0],
            threshold: &[1.5, 0.0, 0.0, 0.0, 0.0],
            default_left: &[false, true, false, false, false],
            left: &[1, 3, -1, -1, -1],
            right: &[2, 4, -1, -1, -1],
            leaf_value: &[0.0, 0.0, 3.0, 1.0, 2.0],
        };
        Forest::new(&[t], 2, 0.0, None).unwrap()
    }

    /// The same tree walked on doubles, the obvious way (tiny values read as 0, as LightGBM).
    fn walk(x0: f64, x1: f64) -> f64 {
        let z = |x: f64| if x.abs() <= 1e-35f32 as f64 { 0.0 } else { x };
        let (x0, x1) = (z(x0), z(x1));
        if x0.is_nan() || x0 > 1.5 {
            3.0
        } else if x1.is_nan() || x1 <= 0.0 {
            1.0
        } else {
            2.0
        }
    }

    #[test]
    fn splits_on_and_around_the_thresholds_and_nan() {
        let f = small();
        let vals = [
            f64::NAN,
            -1.0,
            -0.0,
            0.0,
            1e-300,
            1.5,
            1.5000000000000002,
            2.0,
            f64::INFINITY,
        ];
        let mut x = Vec::new();
        for &a in &vals {
            for &b in &vals {
                x.extend([a, b]);
            }
        }
        for threads in [1, 3] {
            let got = f.predict(&x, 2, threads, threads == 3).unwrap();
            for (i, g) in got.iter().enumerate() {
                assert_eq!(*g, walk(x[2 * i], x[2 * i + 1]), "row {i}");
            }
        }
    }

    #[test]
    fn columns_sigmoid_and_many_rows() {
        let f = small().with_columns(vec![2, 0]).unwrap();
        let n = 3 * BLOCK + 5;
        let x: Vec<f64> = (0..n * 3)
            .map(|i| ((i * 7919) % 13) as f64 * 0.3 - 1.0)
            .collect();
        let got = f.predict(&x, 3, 2, true).unwrap();
        assert_eq!(got, f.predict(&x, 3, 1, false).unwrap());
        for r in 0..n {
            assert_eq!(got[r], walk(x[3 * r + 2], x[3 * r]));
        }
        let t = TreeArrays {
            is_leaf: &[true],
            split_feature: &[0],
            threshold: &[0.0],
            default_left: &[true],
            left: &[-1],
            right: &[-1],
            leaf_value: &[0.25],
        };
        let s = Forest::new(&[t], 1, 0.5, Some(1.0)).unwrap();
        assert_eq!(
            s.predict(&[7.0], 1, 1, true).unwrap(),
            vec![1.0 / (1.0 + (-0.75f64).exp())]
        );
    }

    #[test]
    fn bad_models_and_rows() {
        let t = TreeArrays {
            is_leaf: &[false, true],
            split_feature: &[3],
            threshold: &[0.0, 0.0],
            default_left: &[true, true],
            left: &[1, -1],
            right: &[1, -1],
            leaf_value: &[0.0, 1.0],
        };
        assert!(Forest::new(&[t], 2, 0.0, None)
            .unwrap_err()
            .0
            .contains("split_feature"));
        assert!(small().predict(&[1.0, 2.0, 3.0], 2, 1, true).is_err());
        assert!(small().with_columns(vec![0]).is_err());
        assert!(small()
            .with_columns(vec![0, 5])
            .unwrap()
            .predict(&[0.0; 4], 2, 1, true)
            .is_err());
    }
}
