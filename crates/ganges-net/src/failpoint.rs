//! Fail points: a test's way to crash or stop a ganges process at a named step.
//!
//! `GANGES_FAIL_AT=POINT=ACTION[,POINT=ACTION...]` in a server's or a client's environment
//! makes the first [`hit`] at that point either kill the process at once with SIGKILL
//! (`crash`, as a power cut or `kill -9` would: no destructor, no flush) or stop it with
//! SIGSTOP (`stop`, as a hung machine would, until someone sends SIGCONT or kills it; later
//! hits pass). Without the variable, `hit` reads one value parsed once and takes no lock.
//! The points are named where they are hit (`server.prepare.synced`,
//! `client.write.prepared`, `server.fill.wrote`, ...); tests/commit.rs crashes and stops
//! processes at each.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming the points.
pub const ENV: &str = "GANGES_FAIL_AT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Crash,
    Stop,
}

/// The points the environment names, if it names any.
fn points() -> Option<&'static Mutex<HashMap<String, Action>>> {
    static POINTS: OnceLock<Option<Mutex<HashMap<String, Action>>>> = OnceLock::new();
    POINTS.get_or_init(|| std::env::var(ENV).ok().map(|s| Mutex::new(parse(&s)))).as_ref()
}

fn parse(spec: &str) -> HashMap<String, Action> {
    let mut points = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let action = match item.split_once('=') {
            Some((point, "crash")) => Some((point, Action::Crash)),
            Some((point, "stop")) => Some((point, Action::Stop)),
            _ => None,
        };
        match action {
            Some((point, action)) => {
                points.insert(point.to_string(), action);
            }
            // A test that misspells its point must not pass for the wrong reason.
            None => panic!("{ENV}: `{item}` is not POINT=crash or POINT=stop"),
        }
    }
    points
}

/// Crash or stop here if the environment asks for it at `point` (once).
pub fn hit(point: &str) {
    let Some(points) = points() else { return };
    let taken = points.lock().unwrap_or_else(|e| e.into_inner()).remove(point);
    let Some(action) = taken else { return };
    tracing::warn!(point, ?action, "fail point reached");
    eprintln!("ganges: fail point {point}: {action:?}");
    let signal = match action {
        Action::Crash => rustix::process::Signal::KILL,
        Action::Stop => rustix::process::Signal::STOP,
    };
    let _ = rustix::process::kill_process(rustix::process::getpid(), signal);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_and_a_misspelt_action_is_refused() {
        let p = parse("server.prepare.synced=crash, client.write.prepared=stop");
        assert_eq!(p.get("server.prepare.synced"), Some(&Action::Crash));
        assert_eq!(p.get("client.write.prepared"), Some(&Action::Stop));
        assert!(parse("").is_empty());
        assert!(std::panic::catch_unwind(|| parse("server.x=explode")).is_err());
    }
}
