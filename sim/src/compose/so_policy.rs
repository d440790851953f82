//! Baleen + MAT: the compiled policy .so as the flash cache's admission + prefetch
//! ([`crate::flash::so_policy`]) with MAT as its eviction ([`flash_mat`]). The tests check the
//! verified loader (`core::solib`) through both .so loaders, the flash policy's
//! ([`PolicyLib`]) and MAT's eviction ([`crate::mat::so_evict::EvictLib`]).

use crate::compose::flash_mat::{self, MatFlashResult};
use crate::core::config::{FlashConfig, SimError};
use crate::flash::online_features::FeatureColumns;
use crate::flash::so_policy::with_so_policy;
use crate::flash::Trace;
use crate::mat::{DenseTrace, MatParams, Predictor};

pub use crate::flash::so_policy::{Overrides, PolicyLib};

/// Baleen + MAT: the policy .so as admission + prefetch (as
/// [`crate::flash::so_policy::simulate`]: the same features, thresholds and calls on each GET
/// miss) and MAT as the eviction ([`flash_mat::simulate_mat_flash_with`], its predictor and
/// parameters). `cfg` must have LRU eviction with block-level recency; its admission/prefetch
/// settings are ignored.
#[allow(clippy::too_many_arguments)]
pub fn simulate_mat<P: Predictor>(
    trace: &Trace,
    cols: FeatureColumns,
    cfg: &FlashConfig,
    lib: &PolicyLib,
    overrides: Overrides,
    get_ops: &[u8],
    params: MatParams,
    predictor: P,
    dense: &DenseTrace,
) -> Result<MatFlashResult, SimError> {
    with_so_policy(
        trace,
        cols,
        cfg,
        lib,
        overrides,
        get_ops,
        |base, adm, pf| {
            flash_mat::simulate_mat_flash_with(trace, base, adm, pf, params, predictor, dense)
        },
    )?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::solib::*;
    use crate::mat::so_evict::EvictLib;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Every spelling of one descriptor is a different string that names the same file.
    #[test]
    fn memfd_names_differ_and_name_the_descriptor() {
        let names: Vec<String> = (0..300).map(|k| memfd_name(7, k)).collect();
        assert_eq!(names[0], "/proc/self/fd/7");
        assert_eq!(names[1], "/proc/self/fd/./7");
        assert_eq!(names[2], "/proc/self/fd/.///7");
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd();
        let want = std::fs::metadata(memfd_name(fd, 0)).unwrap();
        for k in [1, 2, 5, 255, 100_000] {
            let got = std::fs::metadata(memfd_name(fd, k)).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert_eq!((got.dev(), got.ino()), (want.dev(), want.ino()), "k = {k}");
        }
    }

    /// A real shared object (an eviction policy with a 1 MiB table, so it has several
    /// loadable segments) built with `cc` into a fresh folder.
    fn build_so(tag: &str) -> (PathBuf, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("flashml-elf-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "static double table[131072] = {1.0};\n\
             double flashml_evict_predict(const double *f) { return table[(int)f[0] & 1]; }\n",
        )
        .unwrap();
        let so = dir.join("good.so");
        let st = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .expect("cc (needed to build a test .so)");
        assert!(st.success());
        let bytes = std::fs::read(&so).unwrap();
        (dir, bytes)
    }

    fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn a_whole_so_passes_the_elf_check_and_loads() {
        let (dir, good) = build_so("good");
        let so = write(&dir, "whole.so", &good);
        check_elf(&so).unwrap();
        let lib = EvictLib::load(&so, None).unwrap();
        assert_eq!(
            lib.predict(&[0.0; crate::mat::lrb_features::EVICT_NUM_FEATURES]),
            1.0
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn truncated_or_foreign_so_is_refused_before_dlopen() {
        let (dir, good) = build_so("bad");
        let mut huge_phoff = good.clone();
        huge_phoff[32..40].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        let mut exec = good.clone();
        exec[16] = 2; // ET_EXEC
        let mut big_segment = good.clone(); // the first PT_LOAD's p_filesz past the file
        let phoff = u64::from_le_bytes(good[32..40].try_into().unwrap()) as usize;
        let phentsize = u16::from_le_bytes([good[54], good[55]]) as usize;
        let load = (0..u16::from_le_bytes([good[56], good[57]]) as usize)
            .map(|i| phoff + i * phentsize)
            .find(|&o| u32::from_le_bytes(good[o..o + 4].try_into().unwrap()) == 1)
            .unwrap();
        big_segment[load + 32..load + 40].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        let mut elf32 = good.clone();
        elf32[4] = 1; // ELFCLASS32
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty", vec![], "not a 64-bit ELF shared object"),
            (
                "63-bytes",
                good[..63].to_vec(),
                "not a 64-bit ELF shared object",
            ),
            (
                "64-bytes",
                good[..64].to_vec(),
                "truncated ELF file (64 bytes)",
            ),
            (
                "half",
                good[..good.len() / 2].to_vec(),
                "truncated ELF file",
            ),
            (
                "last-byte",
                good[..good.len() - 1].to_vec(),
                "truncated ELF file",
            ),
            (
                "text",
                b"#!/bin/sh\necho hello\n".to_vec(),
                "not a 64-bit ELF",
            ),
            (
                "elf-junk",
                [b"\x7fELF".as_slice(), &[0u8; 200]].concat(),
                "not a 64-bit ELF",
            ),
            ("elf32", elf32, "not a 64-bit ELF shared object"),
            ("exec", exec, "an ELF file but not a shared object"),
            ("huge-phoff", huge_phoff, "truncated ELF file"),
            ("segment-past-end", big_segment, "a segment ends at"),
        ];
        for (name, data, want) in cases {
            let so = write(&dir, &format!("{name}.so"), &data);
            let shown = so.display().to_string();
            let e = check_elf(&so).expect_err(name).0;
            assert!(
                e.starts_with(&format!("{shown}: ")) && e.contains(want),
                "{name}: {e}"
            );
            // both loaders refuse it with the same message (before dlopen: no SIGBUS)
            assert_eq!(PolicyLib::load(&so, None).err().expect(name).0, e, "{name}");
            assert_eq!(EvictLib::load(&so, None).err().expect(name).0, e, "{name}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn sha256_hex(data: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn only_bytes_matching_the_manifest_are_mapped() {
        let (dir, good) = build_so("verify");
        let so = write(&dir, "policy.so", &good);
        let want = Expected {
            sha256: sha256_hex(&good),
            size_bytes: good.len() as u64,
        };
        // the verified bytes load, twice in a row (a fresh memfd name each time)
        for _ in 0..3 {
            let lib = EvictLib::load(&so, Some(&want)).unwrap();
            assert_eq!(
                lib.predict(&[0.0; crate::mat::lrb_features::EVICT_NUM_FEATURES]),
                1.0
            );
        }
        let lying_size = Expected {
            size_bytes: want.size_bytes + 1,
            ..want.clone()
        };
        let e = EvictLib::load(&so, Some(&lying_size)).err().unwrap().0;
        assert!(e.contains("bytes does not match manifest.json"), "{e}");
        let lying_sha = Expected {
            sha256: "0".repeat(64),
            ..want.clone()
        };
        let e = PolicyLib::load(&so, Some(&lying_sha)).err().unwrap().0;
        assert!(
            e.contains("sha256") && e.contains("does not match manifest.json"),
            "{e}"
        );
        // a symlink and a FIFO are refused (the FIFO without blocking)
        let link = dir.join("link.so");
        std::os::unix::fs::symlink(&so, &link).unwrap();
        let e = EvictLib::load(&link, Some(&want)).err().unwrap().0;
        assert!(e.contains("a symbolic link; refused"), "{e}");
        let fifo = dir.join("fifo.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = EvictLib::load(&fifo, None).err().unwrap().0;
        assert!(e.contains("a FIFO, not a regular file; refused"), "{e}");
        assert!(Expected::from_parts("x", None, None, false).is_err());
        assert!(Expected::from_parts("x", Some("a".into()), None, true).is_err());
        assert_eq!(Expected::from_parts("x", None, None, true).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
