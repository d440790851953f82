//! Compositions of several systems, above them: MAT as the eviction of Baleen's flash cache
//! ([`flash_mat`]) and the compiled policy .so as Baleen's admission + prefetch, alone or with
//! MAT ([`so_policy`], its features computed online by `flash::online_features`, loaded by
//! `core::solib`).

pub mod flash_mat;
pub mod so_policy;
