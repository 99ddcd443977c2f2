//! The few process-management calls the harness makes (Linux), through rustix.
//!
//! Every process the harness starts is the `ganges` binary itself (a server, a stress, the
//! supervisor), so a child is tied to its parent by an environment variable that the child
//! acts on first thing ([`apply_tie`]), with safe calls, instead of by code run between fork
//! and exec.

use rustix::process::{Pid, Signal};
use std::process::Command;

/// Set on a child that must die with its parent: the parent's pid.
pub const DIE_WITH_PARENT_ENV: &str = "GANGES_DIE_WITH_PARENT";
/// Set on a child that must start a session of its own (a detached supervisor, which the
/// terminal's Ctrl-C and hang-up must not reach).
pub const NEW_SESSION_ENV: &str = "GANGES_NEW_SESSION";

pub const SIGCONT: Signal = Signal::CONT;
pub const SIGINT: Signal = Signal::INT;
pub const SIGKILL: Signal = Signal::KILL;
pub const SIGSTOP: Signal = Signal::STOP;
pub const SIGTERM: Signal = Signal::TERM;
pub const SIGUSR1: Signal = Signal::USR1;

/// Make a child die when its parent does (so no server outlives a killed cluster or CI job),
/// or start a session of its own (`new_session`).
pub fn tie_to_parent(cmd: &mut Command, new_session: bool) {
    if new_session {
        cmd.env(NEW_SESSION_ENV, "1").env_remove(DIE_WITH_PARENT_ENV);
    } else {
        cmd.env(DIE_WITH_PARENT_ENV, std::process::id().to_string()).env_remove(NEW_SESSION_ENV);
    }
}

/// In a child started through [`tie_to_parent`], first thing: ask the kernel to kill this
/// process when its parent dies (and exit at once if the parent already has), or start a new
/// session. Does nothing in a process started otherwise.
pub fn apply_tie() -> std::io::Result<()> {
    if std::env::var_os(NEW_SESSION_ENV).is_some() {
        rustix::process::setsid()?;
        return Ok(());
    }
    let Some(parent) = std::env::var(DIE_WITH_PARENT_ENV).ok().and_then(|p| p.parse::<u32>().ok()) else {
        return Ok(());
    };
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    // The parent may have died before the request took effect.
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent) {
        std::process::exit(1);
    }
    Ok(())
}

/// The signals that ask a ganges process to stop and clean up: SIGINT (Ctrl-C), SIGTERM
/// (`kill`, a scheduler's time limit) and SIGHUP (a closed terminal). From `new` on they no
/// longer end the process by themselves: the caller stops when [`StopSignals::recv`] returns.
#[derive(Debug)]
pub struct StopSignals([tokio::signal::unix::Signal; 3]);

impl StopSignals {
    /// Must be called within a tokio runtime.
    pub fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals([
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
        ]))
    }

    /// The next stop asked for.
    pub async fn recv(&mut self) {
        let [int, term, hup] = &mut self.0;
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
    }
}

fn pid(pid: u32) -> Option<Pid> {
    Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Send `signal` to process `pid`. False if it does not exist.
pub fn signal(p: u32, signal: Signal) -> bool {
    pid(p).is_some_and(|p| rustix::process::kill_process(p, signal).is_ok())
}

/// Whether process `pid` exists and has not exited (a zombie, one that exited but whose
/// parent has not reaped it, as happens to a detached supervisor under an init that does not
/// reap, counts as gone).
pub fn alive(p: u32) -> bool {
    if pid(p).is_none_or(|p| rustix::process::test_kill_process(p).is_err()) {
        return false;
    }
    // /proc/PID/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
    match std::fs::read_to_string(format!("/proc/{p}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// User and system CPU seconds process `p` has used (`/proc/PID/stat`'s utime and stime, the
/// 12th and 13th fields after the command's closing parenthesis, in clock ticks).
pub fn cpu_secs(p: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / rustix::param::clock_ticks_per_second() as f64)
}

/// CPU seconds the whole machine has spent busy and in all, summed over its CPUs
/// (`/proc/stat`, read by `ceft::parse_proc_stat` and summed by `ceft::cpu_sum`); `None` where
/// there is no `/proc/stat`.
pub fn machine_cpu_secs() -> Option<(f64, f64)> {
    let cpus = ganges_core::ceft::parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?);
    let all = ganges_core::ceft::cpu_sum(&cpus);
    let hz = rustix::param::clock_ticks_per_second() as f64;
    (!cpus.is_empty()).then(|| (all.busy as f64 / hz, all.total as f64 / hz))
}

/// Bytes free for an unprivileged user on the file system holding `path`, if it can be asked.
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail * st.f_frsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_counts_a_spinning_thread_as_busy() {
        let Some((busy0, total0)) = machine_cpu_secs() else {
            eprintln!("skipped: this machine has no /proc/stat");
            return;
        };
        assert!(busy0 > 0.0 && busy0 <= total0, "busy {busy0} of {total0}");
        // Spin for 0.3 s of wall time: at least most of that is busy CPU time somewhere.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < until {
            std::hint::black_box(0u64);
        }
        let (busy1, total1) = machine_cpu_secs().expect("read once, read again");
        assert!(busy1 - busy0 >= 0.2, "a 0.3 s spin showed {:.3} busy CPU seconds", busy1 - busy0);
        assert!(total1 - total0 >= busy1 - busy0);
    }
}
