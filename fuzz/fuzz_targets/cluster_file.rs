//! Any text as a cluster file: parsed and checked without a panic, whatever it says.
#![no_main]

use ganges_client::cluster::ClusterFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(file) = ClusterFile::parse(text, std::path::Path::new("/nonexistent/cluster.toml")) {
        for s in &file.servers {
            let _ = file.server(s.node);
        }
        let _ = file.secret_path();
    }
});
