//! The dashboard's HTTP side: one static page (with uPlot, vendored), a stream of
//! server-sent events carrying each snapshot, and a small API to set and clear faults.
//!
//! Routes: `GET /` the page; `GET /uPlot.iife.min.js`, `/uPlot.min.css`; `GET /events` the
//! event stream (`history` once, then `frame` every tick); `GET /api/snapshot` the latest
//! frame; `POST /api/fault` with `{"node": 2, "factor": 0.5}`, `{"node": 2,
//! "competing_share": 0.5}` or `{"node": 2, "clear": true}`. There is no authentication:
//! anyone who reaches the port can set faults, so it listens on loopback unless told
//! otherwise.

use crate::Live;
use ganges_core::disk::Fault;
use ganges_core::ids::NodeId;
use ganges_net::http;
use ganges_proto::control::RealFaults;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const PAGE: &str = include_str!("../assets/index.html");
const UPLOT_JS: &str = include_str!("../assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/uPlot.min.css");
/// Connections served at once; past this, new ones wait.
const CONNECTIONS: usize = 64;
/// A request must arrive whole within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve the dashboard on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, live: Live) {
    let permits = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let Ok((stream, _)) = listener.accept().await else { continue };
        let live = live.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = answer(stream, &live).await {
                tracing::debug!(%e, "dashboard connection ended");
            }
        });
    }
}

async fn answer(mut stream: TcpStream, live: &Live) -> std::io::Result<()> {
    let request = match tokio::time::timeout(REQUEST_TIMEOUT, http::read_request(&mut stream)).await {
        Err(_) | Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return http::respond_error(&mut stream, &e).await,
        Ok(Ok(Some(r))) => r,
    };
    let ok = "200 OK";
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/" | "/index.html") => {
            http::respond(&mut stream, ok, "text/html; charset=utf-8", PAGE.as_bytes()).await
        }
        ("GET", "/uPlot.iife.min.js") => {
            http::respond(&mut stream, ok, "text/javascript; charset=utf-8", UPLOT_JS.as_bytes()).await
        }
        ("GET", "/uPlot.min.css") => {
            http::respond(&mut stream, ok, "text/css; charset=utf-8", UPLOT_CSS.as_bytes()).await
        }
        ("GET", "/api/snapshot") => {
            let frame = live.latest();
            http::respond(&mut stream, ok, "application/json", frame.json.as_bytes()).await
        }
        ("GET", "/events") => events(stream, live).await,
        ("POST", "/api/fault") => {
            let (status, body) = match fault(live, &request.body).await {
                Ok(said) => (ok, serde_json::json!({ "ok": true, "message": said })),
                Err(why) => ("400 Bad Request", serde_json::json!({ "ok": false, "error": why })),
            };
            http::respond(&mut stream, status, "application/json", body.to_string().as_bytes()).await
        }
        ("GET", _) => http::respond(&mut stream, "404 Not Found", "text/plain", b"no such page\n").await,
        _ => http::respond(&mut stream, "405 Method Not Allowed", "text/plain", b"GET, or POST /api/fault\n").await,
    }
}

/// The event stream: the last minute first, then every frame as it is made.
async fn events(mut stream: TcpStream, live: &Live) -> std::io::Result<()> {
    let mut frames = live.subscribe();
    http::sse_start(&mut stream).await?;
    http::sse_event(&mut stream, "history", &live.history_json()).await?;
    loop {
        let frame = frames.borrow_and_update().clone();
        http::sse_event(&mut stream, "frame", &frame.json).await?;
        if frames.changed().await.is_err() {
            return Ok(());
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultBody {
    node: u32,
    #[serde(default)]
    factor: Option<f64>,
    #[serde(default)]
    competing_share: Option<f64>,
    #[serde(default)]
    clear: bool,
}

/// Carry out a fault request; what was done, or why not.
async fn fault(live: &Live, body: &[u8]) -> Result<String, String> {
    let b: FaultBody = serde_json::from_slice(body).map_err(|e| format!("bad request: {e}"))?;
    let client = live.client();
    if b.node >= client.nodes() {
        return Err(format!("node{} is not in the cluster ({} nodes)", b.node, client.nodes()));
    }
    let node = NodeId(b.node);
    let model = match (b.factor, b.competing_share, b.clear) {
        (None, None, true) => {
            ganges_client::fault::clear(&client, Some(&[node])).await.map_err(|e| e.to_string())?;
            return Ok(format!("{node}: faults cleared"));
        }
        (Some(factor), None, false) => Fault::Factor { factor },
        (None, Some(share), false) => Fault::Competing { share },
        _ => return Err("give one of factor, competing_share or clear".into()),
    };
    model.validate().map_err(|e| e.to_string())?;
    ganges_client::fault::set(&client, &[node], Some(model), &RealFaults::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!("{node}: {model}"))
}
