//! The few system calls the CLI makes for process management (Linux).
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Make a child die when its parent does (so no server outlives a killed cluster or CI job),
/// and optionally start a new session (a detached supervisor is not killed by the terminal's
/// Ctrl-C).
pub fn tie_to_parent(cmd: &mut Command, new_session: bool) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid, setsid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if new_session {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            Ok(())
        });
    }
}

/// Send `signal` to process `pid`. False if it does not exist.
pub fn signal(pid: u32, signal: i32) -> bool {
    // SAFETY: kill has no memory effects; a bad pid is an error return.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// Whether process `pid` exists and has not exited (signal 0 checks without sending; a
/// zombie, one that exited but whose parent has not reaped it, as happens to a detached
/// supervisor under an init that does not reap, counts as gone).
pub fn alive(pid: u32) -> bool {
    if !signal(pid, 0) {
        return false;
    }
    // /proc/PID/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

pub use libc::{SIGCONT, SIGINT, SIGKILL, SIGSTOP, SIGTERM};

/// Bytes free for an unprivileged user on the file system holding `path`, if it can be asked.
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid out-pointer for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}
