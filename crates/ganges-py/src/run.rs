//! `Cluster.run`: River's query primitives from Python, as `ganges run` runs them with
//! `--in-process` (every worker a task of this process). The report is a dict.

use crate::errors::{self, invalid};
use crate::runtime::wait_made;
use ganges_client::Client;
use ganges_flow::apps::{AppError, Primitive, Ran, Setup};
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
    pub after: Option<usize>,
    pub key_bytes: u32,
    pub records: Option<u64>,
    pub data_seed: u64,
    pub check: bool,
}

/// `primitive` on `names`, in the order `ganges run` takes them.
fn primitive(name: &str, names: Vec<DatasetName>, o: Options) -> PyResult<Primitive> {
    let want: &[&str] = match name {
        "scan" | "check" => &["input"],
        "generate" => &["output"],
        "filter" | "sort" => &["input", "output"],
        "topn" => &["input", "runs"],
        "join" => &["left", "right", "output"],
        _ => {
            return Err(invalid(format!(
                "no primitive `{name}`: one of scan, generate, filter, topn, join, sort, check"
            )));
        }
    };
    let [a, b, c]: [Option<DatasetName>; 3] = match names.len() == want.len() {
        true => {
            let mut it = names.into_iter();
            [it.next(), it.next(), it.next()]
        }
        false => {
            return Err(invalid(format!("`{name}` takes {} ({}), got {}", want.len(), want.join(", "), names.len())));
        }
    };
    let (a, b, c) = (a.expect("counted"), b, c);
    Ok(match name {
        "scan" => Primitive::Scan { input: a },
        "check" => Primitive::Check { name: a },
        "generate" => Primitive::Generate {
            output: a,
            records: o.records.ok_or_else(|| invalid("`generate` needs records=N (how many 100-byte records)"))?,
            seed: o.data_seed,
        },
        "filter" => Primitive::Filter { input: a, output: b.expect("counted"), keep: o.keep },
        "sort" => Primitive::Sort { input: a, output: b.expect("counted"), check: o.check },
        "topn" => Primitive::TopN { input: a, runs: b.expect("counted"), n: o.n, after: o.after },
        _ => {
            Primitive::Join { left: a, right: b.expect("counted"), output: c.expect("counted"), key_bytes: o.key_bytes }
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

fn records<'py>(py: Python<'py>, top: &[bytes::Bytes]) -> Vec<Bound<'py, PyBytes>> {
    top.iter().map(|b| PyBytes::new(py, b)).collect()
}

/// Run `name` on `names` (as `ganges run NAME NAMES...`) and report what it did.
pub fn run<'py>(
    py: Python<'py>,
    client: Arc<Client>,
    name: &str,
    names: Vec<DatasetName>,
    o: Options,
) -> PyResult<Bound<'py, PyAny>> {
    let p = primitive(name, names, o)?;
    let setup = Setup::in_process(client.clone(), o.workers.unwrap_or(client.nodes() as usize), o.robust, o.seed);
    let ran = wait_made(py, move || async move { p.run(&setup).await })?.map_err(app_error)?;
    let (report, read_back) = match ran {
        Ran::Report(r, read_back) => (r, read_back),
        Ran::Top(top) => {
            let out = crate::convert::to_python(py, &json!({ "primitive": name }))?;
            out.set_item("top", records(py, &top))?;
            return Ok(out);
        }
        Ran::Check(s) => {
            let mut v = summary(&s);
            v["sorted"] = json!(s.unordered == 0);
            return crate::convert::to_python(py, &v);
        }
    };
    let mut v = json!({
        "primitive": name,
        "seconds": report.seconds,
        "write_seconds": report.write_seconds,
        "bytes_read": report.bytes_read,
        "backup_bytes": report.backup_bytes,
        "bytes_written": report.bytes_written,
        "output": report.output.as_ref().map(|m| m.name.to_string()),
        "summary": summary(&report.summary),
    });
    if name == "sort" {
        v["input"] = summary(&report.input);
    }
    if let Some(s) = read_back {
        v["sorted"] = json!(s.unordered == 0 && s.same_records(&report.input));
    }
    let out = crate::convert::to_python(py, &v)?;
    if name == "topn" {
        out.set_item("top", records(py, &report.top))?;
    }
    Ok(out)
}
