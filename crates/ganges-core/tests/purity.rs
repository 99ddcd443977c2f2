//! docs/design.md's rule: policies are pure. ganges-core reads no clock, draws no ambient
//! randomness, does no I/O and knows nothing of tokio. This test keeps it that way, and holds
//! the simulator (ganges-sim), which drives these policies in virtual time, to the same rule.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "Instant::now",
    "SystemTime",
    "thread_rng",
    "rand::rng(",
    "rand::random",
    "OsRng",
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
    "tokio",
    "File::open",
];

fn scan(dir: &Path, hits: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            scan(&path, hits);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap();
                for f in FORBIDDEN {
                    if code.contains(f) {
                        hits.push(format!("{}:{}: {f}", path.display(), i + 1));
                    }
                }
            }
        }
    }
}

#[test]
fn core_sources_use_no_clock_randomness_or_io() {
    let mut hits = vec![];
    scan(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut hits);
    assert!(hits.is_empty(), "impure calls in ganges-core:\n{}", hits.join("\n"));
}

#[test]
fn the_simulator_uses_no_wall_clock_threads_or_ambient_randomness() {
    let mut hits = vec![];
    scan(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../ganges-sim/src"), &mut hits);
    assert!(hits.is_empty(), "impure calls in ganges-sim:\n{}", hits.join("\n"));
}

#[test]
fn core_depends_on_no_runtime() {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    for name in ["tokio", "async-std", "smol", "mio", "futures"] {
        assert!(!deps.contains(name), "ganges-core must not depend on {name}");
    }
}
