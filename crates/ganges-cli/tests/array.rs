//! `ganges array` as a user runs it: write from a row-major file and from generated elements,
//! read back into other layouts (every element checked), info, bad input, rm; and
//! `bench array --quick`'s outputs.

mod common;

use common::{fails, ok, start};

#[test]
fn a_users_arrays_from_the_shell() {
    let c = start(3, common::disk(256.0));
    let cluster = c.root.path().join("cluster.toml");
    c.local.cluster().save(&cluster).unwrap();
    let cl = cluster.to_str().unwrap();

    // A 96×80 u16 field from a file, written by 6 processes (3×2), stored row-major.
    let field: Vec<u8> = (0..96u16 * 80).rev().flat_map(u16::to_le_bytes).collect();
    let src = c.root.path().join("field.bin");
    std::fs::write(&src, &field).unwrap();
    let out = ok(&[
        "array",
        "write",
        "field",
        "--shape",
        "96,80",
        "--dtype",
        "u16",
        "--memory-mesh",
        "3,2",
        "--disk-mesh",
        "3",
        "--alloc",
        "static",
        "--subchunk",
        "2KiB",
        "--from",
        src.to_str().unwrap(),
        "--cluster",
        cl,
    ]);
    assert!(out.contains("wrote `field`") && out.contains("from 6 processes"), "{out}");
    let copy = c.root.path().join("field.copy");
    let out = ok(&["array", "read", "field", "--memory-mesh", "4", "--memory-dist", "CYCLIC(7),*", "--cluster", cl]);
    assert!(out.contains("into 4 processes") && !out.contains("checked"), "{out}");
    ok(&["array", "read", "field", "--to", copy.to_str().unwrap(), "--cluster", cl]);
    assert!(std::fs::read(&copy).unwrap() == field, "the file read back differs from the one written");

    // Generated elements: every read checks them.
    let out = ok(&[
        "array",
        "write",
        "cube",
        "--shape",
        "32,32,32",
        "--dtype",
        "f64",
        "--memory-mesh",
        "2,2,2",
        "--disk-mesh",
        "2,2,2",
        "--disk-dist",
        "BLOCK,BLOCK,BLOCK",
        "--alloc",
        "dynamic",
        "--subchunk",
        "16KiB",
        "--cluster",
        cl,
    ]);
    assert!(out.contains("16 subchunks") || out.contains("subchunks"), "{out}");
    let out = ok(&["array", "read", "cube", "--memory-mesh", "3", "--cluster", cl]);
    assert!(out.contains("every element checked"), "{out}");
    let info = ok(&["array", "info", "cube", "--cluster", cl]);
    assert!(info.contains("shape      [32, 32, 32] of f64") && info.contains("allocation dynamic"), "{info}");
    let json = ok(&["array", "info", "cube", "--json", "--cluster", cl]);
    let meta: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(meta["places"].as_array().unwrap().len(), 16, "{json}");

    // Bad input: a clear error, nothing written.
    let err =
        fails(&["array", "write", "bad", "--shape", "10,10", "--from", src.to_str().unwrap(), "--cluster", cl], 1);
    assert!(err.contains("holds 15360 bytes"), "{err}");
    let err = fails(
        &["array", "write", "bad", "--shape", "8,8", "--disk-dist", "CYCLIC(2),*", "--disk-mesh", "2", "--cluster", cl],
        1,
    );
    assert!(err.contains("BLOCK or *"), "{err}");
    let err = fails(&["array", "read", "nosuch", "--cluster", cl], 1);
    assert!(err.contains("nosuch"), "{err}");
    let err = fails(&["array", "write", "cube", "--shape", "4,4", "--cluster", cl], 1);
    assert!(err.contains("already exists"), "{err}");

    ok(&["array", "rm", "cube", "--cluster", cl]);
    let err = fails(&["array", "info", "cube", "--cluster", cl], 1);
    assert!(err.contains("cube"), "{err}");
}

#[test]
fn bench_array_writes_json_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let (json, plot) = (dir.path().join("array.json"), dir.path().join("array.png"));
    let out = ok(&[
        "bench",
        "array",
        "--figures",
        "row-major,iterations",
        "--servers",
        "2",
        "--iteration-servers",
        "2",
        "--iterations",
        "5",
        "--shape",
        "64,64,128",
        "--allocs",
        "round-robin,dynamic",
        "--disk-rate",
        "64MiB/s",
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(out.contains("Figure 5") && out.contains("Figures 6-7"), "{out}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    // Figure 5 at 2 servers: 0, 1 and 2 slow, for each allocation; then 5 calls each.
    assert_eq!(rows.len(), 2 * 3 + 2 * 5, "{report}");
    for r in rows {
        let f = r["frac_peak"].as_f64().unwrap();
        assert!(f > 0.2 && f < 1.05, "a write's fraction of peak is {f}: {r}");
    }
    assert!(std::fs::metadata(&plot).unwrap().len() > 1000);
}
