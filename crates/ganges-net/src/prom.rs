//! The Prometheus text format (version 0.0.4), written by hand: a few lines per metric,
//! shared by the servers' and the clients' metrics endpoints.

use crate::http;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// A request slower than this is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Content type of a metrics response.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes metric families: `# HELP`, `# TYPE`, then samples.
#[derive(Debug, Default)]
pub struct Text(String);

impl Text {
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {}", number(value));
    }

    /// A family with one unlabelled sample.
    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    pub fn finish(self) -> String {
        self.0
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: integers without a fraction.
pub fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

/// Answer `GET /metrics` (and `GET /`) on `listener` with what `render` returns at the time,
/// one request per connection, until the task is dropped.
pub async fn serve(listener: TcpListener, render: impl Fn() -> String + Send + Sync + 'static) {
    let render = Arc::new(render);
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let render = render.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &*render)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, render: &(dyn Fn() -> String + Send + Sync)) -> std::io::Result<()> {
    let request = match http::read_request(&mut stream).await {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e) => return http::respond_error(&mut stream, &e).await,
    };
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/metrics" | "/") => http::respond(&mut stream, "200 OK", CONTENT_TYPE, render().as_bytes()).await,
        ("GET", _) => http::respond(&mut stream, "404 Not Found", "text/plain", b"ganges serves /metrics only\n").await,
        _ => http::respond(&mut stream, "405 Method Not Allowed", "text/plain", b"GET /metrics\n").await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_numbers_plain() {
        let mut t = Text::default();
        t.sample("x", &[("a", "q\"b\\c\nd")], 3.0);
        t.sample("y", &[], 0.25);
        assert_eq!(t.finish(), "x{a=\"q\\\"b\\\\c\\nd\"} 3\ny 0.25\n");
    }
}
