//! `ganges array export`: an array as a Zarr v3 array (a folder with `zarr.json` and one file
//! per chunk, `c/i/j/k`), which zarr-python, TensorStore, zarrs and the other Zarr readers
//! open. The chunk shape is the array's first subchunk's, so each Zarr chunk is usually one
//! subchunk; chunks at the array's edges are padded with zeros, as Zarr's regular grid wants.

use super::meta;
use super::read::read_regions;
use crate::client::Client;
use crate::error::{ClientError, Result};
use ganges_core::array::{DType, Region, copy_overlap};
use ganges_proto::manifest::Manifest;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What an export wrote.
#[derive(Clone, Debug)]
pub struct ZarrExport {
    pub dir: PathBuf,
    pub chunk_shape: Vec<u64>,
    pub chunks: u64,
    pub bytes: u64,
}

fn zarr_type(d: DType) -> &'static str {
    match d {
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::U16 => "uint16",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::I32 => "int32",
        DType::F32 => "float32",
        DType::U64 => "uint64",
        DType::I64 => "int64",
        DType::F64 => "float64",
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> ClientError {
    move |err| ClientError::Io { what, err }
}

/// Write the array in `manifest` to `dir` (which must not exist) as a Zarr v3 array. The
/// folder appears whole or not at all: it is written beside it and renamed at the end.
pub async fn export_zarr(client: &Arc<Client>, manifest: &Arc<Manifest>, dir: &Path) -> Result<ZarrExport> {
    let meta = meta(manifest)?;
    let schema = &meta.schema;
    if dir.exists() {
        return Err(ClientError::Invalid(format!("{} exists already; give a new folder", dir.display())));
    }
    let subs = meta.subchunks().map_err(|e| ClientError::Invalid(e.to_string()))?;
    let chunk_shape: Vec<u64> = (0..schema.rank()).map(|d| subs.boxes[0].extent(d)).collect();
    let grid: Vec<u64> = schema.shape.iter().zip(&chunk_shape).map(|(n, c)| n.div_ceil(*c)).collect();
    let count: u64 = grid.iter().product();
    let mut cells = Vec::with_capacity(count as usize);
    let mut targets = Vec::with_capacity(count as usize);
    for k in 0..count {
        let mut rest = k;
        let mut cell = vec![0u64; grid.len()];
        for d in (0..grid.len()).rev() {
            cell[d] = rest % grid[d];
            rest /= grid[d];
        }
        let clipped: Vec<Range<u64>> = (0..grid.len())
            .map(|d| cell[d] * chunk_shape[d]..((cell[d] + 1) * chunk_shape[d]).min(schema.shape[d]))
            .collect();
        targets.push(Region::boxed(clipped));
        cells.push(cell);
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "array".into());
    let partial = dir.with_file_name(format!(".{name}.ganges-partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io(format!("removing {}", partial.display())))?;
    }
    std::fs::create_dir_all(&partial).map_err(io(format!("creating {}", partial.display())))?;
    let elem = schema.dtype.size();
    let full_bytes = chunk_shape.iter().product::<u64>() * u64::from(elem);
    let mut written = 0u64;
    let result = read_regions(client, manifest, &targets, super::ARRAY_READ_POLICY, |t, bytes| {
        let region = &targets[t];
        // Pad an edge chunk to the full chunk shape.
        let data = if region.elements() * u64::from(elem) == full_bytes {
            bytes
        } else {
            let full = Region::boxed(
                (0..grid.len()).map(|d| cells[t][d] * chunk_shape[d]..(cells[t][d] + 1) * chunk_shape[d]).collect(),
            );
            let mut out = vec![0u8; full_bytes as usize];
            copy_overlap(elem, region, &bytes, &full, &mut out, region)
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            out
        };
        let mut path = partial.join("c");
        for c in &cells[t] {
            path.push(c.to_string());
        }
        std::fs::create_dir_all(path.parent().expect("under c/"))
            .map_err(io(format!("creating {}", path.display())))?;
        std::fs::write(&path, &data).map_err(io(format!("writing {}", path.display())))?;
        written += data.len() as u64;
        Ok(())
    })
    .await;
    let finish = result.and_then(|()| {
        let codec = if elem == 1 {
            serde_json::json!({ "name": "bytes" })
        } else {
            serde_json::json!({ "name": "bytes", "configuration": { "endian": "little" } })
        };
        let float = matches!(schema.dtype, DType::F32 | DType::F64);
        let doc = serde_json::json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": schema.shape,
            "data_type": zarr_type(schema.dtype),
            "chunk_grid": { "name": "regular", "configuration": { "chunk_shape": chunk_shape } },
            "chunk_key_encoding": { "name": "default", "configuration": { "separator": "/" } },
            "fill_value": if float { serde_json::json!(0.0) } else { serde_json::json!(0) },
            "codecs": [codec],
            "attributes": { "ganges": { "array": manifest.name.as_str(), "digest": manifest.digest.to_string() } },
        });
        let text = serde_json::to_string_pretty(&doc).expect("json values serialise");
        let path = partial.join("zarr.json");
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        std::fs::rename(&partial, dir).map_err(io(format!("renaming {} to {}", partial.display(), dir.display())))
    });
    if let Err(e) = finish {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e);
    }
    Ok(ZarrExport { dir: dir.to_path_buf(), chunk_shape, chunks: count, bytes: written })
}
