//! KML: the offline twin of learned readahead ([`readahead`]): a closed-loop page cache with
//! Linux-like mmap readahead over a throttled device, run per feature window.

pub mod readahead;
pub mod settings;
