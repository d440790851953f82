//! Compositions of several systems, above them: MAT as the eviction of Baleen's flash cache
//! ([`flash_mat`]), and with it the compiled policy .so as Baleen's admission + prefetch
//! ([`so_policy`]; the .so alone is the flash system's, `flash::so_policy`, its features
//! computed online by `flash::online_features`, loaded by `core::solib`).

pub mod flash_mat;
pub mod so_policy;
