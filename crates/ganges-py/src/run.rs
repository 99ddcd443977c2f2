//! `Cluster.run`: River's query primitives from Python, as `ganges run` runs them with
//! `--in-process` (every worker a task of this process). The report is a dict.

use crate::errors::{self, invalid};
use crate::runtime::wait_made;
use ganges_client::Client;
use ganges_flow::apps::{self, AppError, AppReport, Setup};
use ganges_flow::records::Summary;
use ganges_proto::manifest::DatasetName;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{Value, json};
use std::sync::Arc;

/// What a primitive takes beyond its datasets.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub workers: Option<usize>,
    pub robust: bool,
    pub seed: u64,
    pub keep: f64,
    pub n: usize,
    pub key_bytes: u32,
    pub records: Option<u64>,
    pub data_seed: u64,
}

/// The dataset names each primitive takes, in order.
fn datasets_of(primitive: &str) -> PyResult<&'static [&'static str]> {
    Ok(match primitive {
        "scan" => &["input"],
        "generate" => &["output"],
        "filter" | "sort" => &["input", "output"],
        "topn" => &["input", "runs"],
        "join" => &["left", "right", "output"],
        "check" => &["name"],
        _ => {
            return Err(invalid(format!(
                "no primitive `{primitive}`: one of scan, generate, filter, topn, join, sort, check"
            )));
        }
    })
}

fn summary(s: &Summary) -> Value {
    json!({
        "records": s.records,
        "checksum": format!("{:x}", s.checksum),
        "unordered": s.unordered,
        "duplicate_keys": s.duplicate_keys,
    })
}

fn app_error(e: AppError) -> PyErr {
    match e {
        AppError::Client(e) => errors::client(e),
        other => invalid(other.to_string()),
    }
}

/// Run `primitive` on `names` (as `ganges run PRIMITIVE NAMES...`) and report what it did.
pub fn run<'py>(
    py: Python<'py>,
    client: Arc<Client>,
    primitive: &str,
    names: Vec<DatasetName>,
    o: Options,
) -> PyResult<Bound<'py, PyAny>> {
    let want = datasets_of(primitive)?;
    if names.len() != want.len() {
        return Err(invalid(format!("`{primitive}` takes {} ({}), got {}", want.len(), want.join(", "), names.len())));
    }
    if primitive == "generate" && o.records.is_none() {
        return Err(invalid("`generate` needs records=N (how many 100-byte records)"));
    }
    let setup = Setup::in_process(client.clone(), o.workers.unwrap_or(client.nodes() as usize), o.robust, o.seed);
    let p = primitive.to_string();
    let done = wait_made(py, move || async move {
        let n = &names;
        let r = match p.as_str() {
            "scan" => apps::scan(&setup, &n[0]).await,
            "generate" => apps::generate(&setup, &n[0], o.records.unwrap_or(0), o.data_seed).await,
            "filter" => apps::filter(&setup, &n[0], &n[1], apps::key_below(o.keep)).await,
            "topn" => apps::topn(&setup, &n[0], &n[1], o.n).await,
            "join" => apps::join(&setup, &n[0], &n[1], &n[2], o.key_bytes).await,
            "sort" => apps::sort(&setup, &n[0], &n[1]).await,
            _ => {
                let s = apps::check(&client, &n[0]).await?;
                return Ok(Err(s));
            }
        };
        r.map(Ok)
    })?
    .map_err(app_error)?;
    let report: AppReport = match done {
        Ok(r) => r,
        Err(check) => {
            let mut v = summary(&check);
            v["sorted"] = json!(check.unordered == 0);
            return crate::convert::to_python(py, &v);
        }
    };
    let v = json!({
        "primitive": primitive,
        "seconds": report.seconds,
        "write_seconds": report.write_seconds,
        "bytes_read": report.bytes_read,
        "backup_bytes": report.backup_bytes,
        "bytes_written": report.bytes_written,
        "output": report.output.as_ref().map(|m| m.name.to_string()),
        "summary": summary(&report.summary),
    });
    let out = crate::convert::to_python(py, &v)?;
    if primitive == "topn" {
        let top: Vec<Bound<'py, PyBytes>> = report.top.iter().map(|b| PyBytes::new(py, b)).collect();
        out.set_item("top", top)?;
    }
    if primitive == "sort" {
        out.set_item("input", crate::convert::to_python(py, &summary(&report.input))?)?;
    }
    Ok(out)
}
