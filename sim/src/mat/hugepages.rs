//! Transparent huge pages for the simulator's large per-object arrays.
//!
//! MAT's simulator reads a few per-object arrays (the feature metadata, where each object is
//! cached) at random, one entry per request: with 4 KiB pages most of those reads also miss
//! the TLB (a page walk before the cache miss). Asking the kernel for 2 MiB pages on these
//! arrays (`madvise(MADV_HUGEPAGE)`, honoured where transparent huge pages are in `madvise`
//! or `always` mode, the default of common distributions) removes most of the walks. On a
//! 1 M-request cdn-like trace (interleaved runs) MAT's simulator ran ~15% faster with every
//! allocation of the process on huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), and 8%
//! faster with only its feature histories (`crate::mat::lrb_features`, one arena) and metadata
//! advised here. Where THP is off it is a no-op; the contents are the same either way.

/// Arrays smaller than this stay on normal pages (a huge page would be mostly empty).
const MIN_BYTES: usize = 4 << 20;

/// An empty vector with room for `n` elements, advised to use huge pages (grow it within
/// that room to keep them).
pub(crate) fn with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise(v.as_ptr() as usize, n * std::mem::size_of::<T>());
    v
}

/// A vector of `n` copies of `x`, its memory advised to use huge pages before it is first
/// written (the kernel backs a region with huge pages when it is faulted in).
pub(crate) fn filled<T: Clone>(n: usize, x: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise(v.as_ptr() as usize, n * std::mem::size_of::<T>());
    v.resize(n, x);
    v
}

#[cfg(target_os = "linux")]
fn advise(addr: usize, len: usize) {
    if len < MIN_BYTES {
        return;
    }
    const PAGE: usize = 4096;
    let start = addr.next_multiple_of(PAGE);
    let end = (addr + len) & !(PAGE - 1);
    if end > start {
        // SAFETY: the range lies inside an allocation this process owns; MADV_HUGEPAGE only
        // changes how the kernel backs it (an error, e.g. THP not built in, is ignored).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_addr: usize, _len: usize) {}

#[cfg(test)]
mod tests {
    #[test]
    fn filled_is_vec_of_copies() {
        for n in [0, 1, 1000, (8 << 20) / 24 + 3] {
            let v = super::filled(n, (7u64, 3u32));
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == (7, 3)));
        }
    }
}
