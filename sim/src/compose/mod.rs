//! Compositions of several systems, above them: MAT as the eviction of Baleen's flash cache
//! ([`flash_mat`]), the compiled policy .so as Baleen's admission + prefetch, alone or with
//! MAT ([`so_policy`], its features computed online by `flash::online_features`), and the
//! compiled eviction .so as MAT's predictor ([`so_evict`], loaded by `so_policy`'s verified
//! loader).

pub mod flash_mat;
pub mod so_evict;
pub mod so_policy;
