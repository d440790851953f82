//! The folders of `src/` keep the dependency rule written in `src/lib.rs`: `core` uses no
//! other folder; a system (`flash`, `mat`, `pannier`, `mlcache`, `kml`) uses only `core` and
//! itself; `compose` uses `core` and the systems; `python` may use everything. This reads the
//! sources, collects every `crate::<folder>` path outside comments per top-level folder, and
//! fails on an edge the rule does not allow or on a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

const SYSTEMS: &[&str] = &["flash", "mat", "pannier", "mlcache", "kml"];

fn allowed(from: &str, to: &str) -> bool {
    if from == to || to == "core" {
        return true;
    }
    match from {
        "core" => false,
        "compose" => SYSTEMS.contains(&to),
        "python" => true,
        _ => false,
    }
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level folders each folder's code names through `crate::`.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let mut parts = rel.components();
        let first = parts
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap()
            .to_string();
        if parts.next().is_none() {
            // lib.rs: the module table, above every folder.
            continue;
        }
        let tos = out.entry(first.clone()).or_default();
        for line in fs::read_to_string(&f).unwrap().lines() {
            let code = line.split("//").next().unwrap();
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    tos.insert(name);
                }
            }
        }
    }
    out
}

fn has_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> bool {
        match state.get(n) {
            Some(1) => {
                path.push(n.to_string());
                return true;
            }
            Some(2) => return false,
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if m != n && visit(m, g, state, path) {
                return true;
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        false
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        let mut path = Vec::new();
        if visit(n, g, &mut state, &mut path) {
            return Some(path);
        }
    }
    None
}

#[test]
fn folders_keep_the_dependency_rule() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = edges(&src);
    for folder in ["core", "compose", "python"].iter().chain(SYSTEMS) {
        assert!(g.contains_key(*folder), "src/{folder}/ is missing");
    }
    let mut bad = Vec::new();
    for (from, tos) in &g {
        for to in tos {
            assert!(
                g.contains_key(to),
                "src/{from}/ names crate::{to}, not a folder"
            );
            if !allowed(from, to) {
                bad.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(bad.is_empty(), "edges the rule forbids: {bad:?}");
    assert_eq!(has_cycle(&g), None, "a cycle between folders");
}

#[test]
fn the_rule_rejects_an_edge_between_systems() {
    assert!(!allowed("flash", "mat"));
    assert!(!allowed("mat", "compose"));
    assert!(!allowed("core", "flash"));
    assert!(allowed("compose", "mat"));
    assert!(allowed("pannier", "core"));
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert!(has_cycle(&g).is_some());
}
