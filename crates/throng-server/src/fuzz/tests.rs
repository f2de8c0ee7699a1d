//! The corpus replay: every input kept in `fuzz/corpus/<target>/` (the
//! seeds, what `cargo fuzz cmin` kept of past runs, past findings) through
//! its target, on every `cargo test`, stable toolchain, no fuzzer needed.

use std::path::{Path, PathBuf};

use super::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of a target's corpus, sorted.
fn corpus(name: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_input_passes_its_target() {
    let mut failed = Vec::new();
    let mut count = 0;
    for &(name, target) in TARGETS {
        for file in corpus(name) {
            let data = std::fs::read(&file).expect("a corpus file");
            count += 1;
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    assert!(count > 0, "no corpus");
    assert!(
        failed.is_empty(),
        "{} of {count} inputs fail (each one's panic is printed above): {failed:#?}",
        failed.len()
    );
}

#[test]
fn each_target_has_its_binary_and_corpus() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let manifest: toml::Table = toml::from_str(&manifest).expect("fuzz/Cargo.toml is TOML");
    let mut bins: Vec<&str> = manifest["bin"]
        .as_array()
        .expect("[[bin]]")
        .iter()
        .map(|b| b["name"].as_str().expect("a bin's name"))
        .collect();
    let mut names: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
    bins.sort_unstable();
    names.sort_unstable();
    assert_eq!(bins, names, "fuzz/Cargo.toml's [[bin]]s and fuzz::TARGETS");
    for name in names {
        let source = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&source).expect("a target's source");
        assert!(
            text.contains(&format!("throng_server::fuzz::{name}(")),
            "{} does not call fuzz::{name}",
            source.display()
        );
        assert!(!corpus(name).is_empty(), "fuzz/corpus/{name}/ is empty");
    }
}
