//! Real faults (FI-2): a server makes its own machine slow, for real, on request.
//!
//! - **Kernel throttle** (`kernel_read_bytes_per_sec`, `kernel_write_bytes_per_sec`): the
//!   server moves its process into a block-I/O cgroup of its own and caps it on the device
//!   that holds its data directory: cgroup v1 `blkio.throttle.*_bps_device`, else cgroup v2
//!   `io.max`. The kernel then holds every read (and direct write) of the server to the cap.
//!   Reads the page cache answers never reach the device, so `--direct-io` makes the cap
//!   hold for all of them.
//! - **Competing reader** (gd-enhancements §4.1): a process (`ganges compete`, started from
//!   the server's `helper` binary) reads another large file on the same device with direct
//!   I/O, at a share of the rate it first measures alone. It joins the server's throttle
//!   group when there is one, so on a machine whose servers share one disk and are each
//!   capped to their part of it, it competes for its server's part only.
//! - **Link** (`link_bytes_per_sec`, `link_delay_us`): `tc` shapes the interface that holds
//!   the server's listen address, both ways: a token bucket (or netem, for a delay) on its
//!   egress, and its ingress redirected through an `ifb` device shaped the same. Loopback
//!   is refused: every server of the machine shares it.
//!
//! Clearing a fault undoes it; so does the server's exit. What was applied is also written to
//! `faults.json` in the data directory, so a server that was killed undoes it when it starts
//! again ([`recover`]).

use ganges_core::ids::NodeId;
use ganges_proto::control::RealFaults;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The cgroup-v1 hierarchy of the block-I/O controller, and the v2 (unified) mounts.
const BLKIO_V1: &str = "/sys/fs/cgroup/blkio";
const UNIFIED: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];
/// The file that records what is applied, in the data directory.
const STATE_FILE: &str = "faults.json";
/// The competing reader's file and its size: larger than any read-ahead, read over and over.
pub const COMPETE_FILE: &str = "compete.bin";
pub const COMPETE_FILE_BYTES: u64 = 256 << 20;
/// A shaped link's queue: this much time at its rate before packets are dropped (a deep
/// enough buffer that TCP keeps the link full).
const LINK_LATENCY_MS: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum RealFaultError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "the data directory {path} is on no block device (a tmpfs or overlay?); kernel throttles and competing readers need a disk"
    )]
    NoDevice { path: PathBuf },
    #[error("no block-I/O cgroup controller to throttle with: {why}")]
    NoController { why: String },
    #[error("{what} {path}: {err} (kernel throttles need root)")]
    Cgroup { what: &'static str, path: PathBuf, err: std::io::Error },
    #[error("a competing reader: {0}")]
    Competitor(String),
    #[error("shaping the link: {0}")]
    Link(String),
}

type Result<T> = std::result::Result<T, RealFaultError>;

/// What a server needs to know to make faults real.
#[derive(Clone, Debug)]
pub struct FaultEnv {
    pub node: NodeId,
    pub data_dir: PathBuf,
    /// The address the server listens on (its link is the interface holding it).
    pub listen_ip: IpAddr,
    /// The `ganges` binary, to start helper processes from (`None`: none can be started).
    pub helper: Option<PathBuf>,
}

/// What is applied, as recorded in `faults.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Applied {
    /// The throttle group's directory (one per hierarchy it was made in).
    cgroup: Option<PathBuf>,
    /// The shaped interface and its ingress device.
    iface: Option<String>,
    ifb: Option<String>,
}

/// The real faults in force on this server, and what carries them out.
#[derive(Debug, Default)]
pub struct RealFaultState {
    faults: RealFaults,
    applied: Applied,
    competitor: Option<Child>,
}

impl RealFaultState {
    pub fn faults(&self) -> &RealFaults {
        &self.faults
    }

    /// Make `want` the faults in force (each `None` off). On an error, what was in force
    /// before stays as far as it can, and the error says what failed.
    pub fn set(&mut self, want: RealFaults, env: &FaultEnv) -> Result<()> {
        want.validate().map_err(RealFaultError::Invalid)?;
        let throttle = (want.kernel_read_bytes_per_sec, want.kernel_write_bytes_per_sec);
        if throttle != (self.faults.kernel_read_bytes_per_sec, self.faults.kernel_write_bytes_per_sec) {
            self.set_throttle(throttle, env)?;
            self.faults.kernel_read_bytes_per_sec = throttle.0;
            self.faults.kernel_write_bytes_per_sec = throttle.1;
            // A competing reader shares the throttle group: start it again in the new one.
            self.stop_competitor();
            (self.faults.competing_reader, self.faults.competing_bytes_per_sec) = (None, None);
        }
        let competing = (want.competing_reader, want.competing_bytes_per_sec);
        if competing != (self.faults.competing_reader, self.faults.competing_bytes_per_sec) {
            self.stop_competitor();
            (self.faults.competing_reader, self.faults.competing_bytes_per_sec) = (None, None);
            if let Some(share) = want.competing_reader {
                let group = self.applied.cgroup.as_deref();
                self.competitor = Some(start_competitor(share, want.competing_bytes_per_sec, env, group)?);
                (self.faults.competing_reader, self.faults.competing_bytes_per_sec) = competing;
            }
        }
        let link = (want.link_bytes_per_sec, want.link_delay_us);
        if link != (self.faults.link_bytes_per_sec, self.faults.link_delay_us) {
            self.unshape();
            self.faults.link_bytes_per_sec = None;
            self.faults.link_delay_us = None;
            self.save(env);
            if link != (None, None) {
                self.shape(link, env)?;
                (self.faults.link_bytes_per_sec, self.faults.link_delay_us) = link;
            }
        }
        self.save(env);
        Ok(())
    }

    /// Undo every fault (on `fault clear` and at the server's exit).
    pub fn clear(&mut self, env: &FaultEnv) {
        self.stop_competitor();
        if let Err(e) = self.set_throttle((None, None), env) {
            tracing::warn!(%e, "removing the kernel throttle");
        }
        self.unshape();
        self.faults = RealFaults::default();
        self.save(env);
    }

    fn save(&self, env: &FaultEnv) {
        let path = env.data_dir.join(STATE_FILE);
        if self.applied == Applied::default() {
            let _ = std::fs::remove_file(path);
        } else if let Ok(text) = serde_json::to_vec(&self.applied) {
            let _ = std::fs::write(path, text);
        }
    }

    fn set_throttle(&mut self, (read, write): (Option<u64>, Option<u64>), env: &FaultEnv) -> Result<()> {
        if read.is_none() && write.is_none() {
            if let Some(group) = self.applied.cgroup.take() {
                leave_group(&group);
            }
            return Ok(());
        }
        let device = device_of(&env.data_dir)?;
        let group = match &self.applied.cgroup {
            Some(g) => g.clone(),
            None => {
                let g = make_group(env)?;
                self.applied.cgroup = Some(g.clone());
                self.save(env);
                g
            }
        };
        write_limits(&group, device, read, write)
    }

    fn stop_competitor(&mut self) {
        if let Some(mut c) = self.competitor.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn shape(&mut self, (rate, delay): (Option<u64>, Option<u64>), env: &FaultEnv) -> Result<()> {
        if env.listen_ip.is_loopback() || env.listen_ip.is_unspecified() {
            return Err(RealFaultError::Link(format!(
                "the server listens on {}, which is not a link of its own; link faults need a server on its \
                 own address (`ganges local up --netns`, or a host's own address)",
                env.listen_ip
            )));
        }
        let iface = interface_of(env.listen_ip)?;
        let ifb = format!("gifb{}", std::process::id());
        self.applied.iface = Some(iface.clone());
        self.applied.ifb = Some(ifb.clone());
        self.save(env);
        let qdisc = qdisc_args(rate, delay);
        let q: Vec<&str> = qdisc.iter().map(String::as_str).collect();
        let mut root = vec!["qdisc", "replace", "dev", &iface, "root"];
        root.extend(&q);
        tc(&root)?;
        ip(&["link", "add", &ifb, "type", "ifb"])?;
        ip(&["link", "set", &ifb, "up"])?;
        tc(&["qdisc", "add", "dev", &iface, "handle", "ffff:", "ingress"])?;
        tc(&[
            "filter", "add", "dev", &iface, "parent", "ffff:", "protocol", "all", "u32", "match", "u32", "0", "0",
            "action", "mirred", "egress", "redirect", "dev", &ifb,
        ])?;
        let mut ingress = vec!["qdisc", "replace", "dev", &ifb, "root"];
        ingress.extend(&q);
        tc(&ingress)
    }

    fn unshape(&mut self) {
        if let Some(iface) = self.applied.iface.take() {
            let _ = tc(&["qdisc", "del", "dev", &iface, "root"]);
            let _ = tc(&["qdisc", "del", "dev", &iface, "ingress"]);
        }
        if let Some(ifb) = self.applied.ifb.take() {
            let _ = ip(&["link", "del", &ifb]);
        }
    }
}

/// Undo what a server that was killed left applied (`faults.json`), before it serves again.
pub fn recover(data_dir: &Path) {
    let path = data_dir.join(STATE_FILE);
    let Ok(text) = std::fs::read(&path) else { return };
    if let Ok(mut applied) = serde_json::from_slice::<Applied>(&text) {
        tracing::info!(?applied, "undoing the faults a previous run of this server left");
        if let Some(g) = applied.cgroup.take() {
            leave_group(&g);
        }
        let mut st = RealFaultState { applied, ..Default::default() };
        st.unshape();
    }
    let _ = std::fs::remove_file(path);
}

/// The tc arguments of a shaped link: a token bucket at `rate`, or netem for a delay (with
/// the rate too, if given).
fn qdisc_args(rate: Option<u64>, delay: Option<u64>) -> Vec<String> {
    let bits = |r: u64| format!("{}bit", r * 8);
    match (rate, delay) {
        (Some(r), None) => {
            // A bucket of 10 ms at the rate (at least 64 KiB, so offloaded segments fit).
            let burst = (r / 100).max(64 << 10);
            vec![
                "tbf".into(),
                "rate".into(),
                bits(r),
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                format!("{LINK_LATENCY_MS}ms"),
            ]
        }
        (r, Some(d)) => {
            let mut a = vec!["netem".into(), "delay".into(), format!("{d}us")];
            if let Some(r) = r {
                a.extend(["rate".into(), bits(r)]);
            }
            a
        }
        (None, None) => unreachable!("a link fault has a rate or a delay"),
    }
}

fn run(program: &str, args: &[&str]) -> std::result::Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("running {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tc(args: &[&str]) -> Result<()> {
    run("tc", args).map(drop).map_err(|e| {
        let hint = if e.contains("netem") || (args.contains(&"netem") && e.contains("unknown")) {
            " (a link delay needs the kernel's sch_netem module, which this kernel lacks)"
        } else {
            ""
        };
        RealFaultError::Link(format!("{e}{hint}"))
    })
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args).map(drop).map_err(RealFaultError::Link)
}

/// The interface that holds `addr`.
fn interface_of(addr: IpAddr) -> Result<String> {
    let out = run("ip", &["-o", "addr", "show"]).map_err(RealFaultError::Link)?;
    out.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let (_, iface) = (w.next()?, w.next()?);
            let (_, cidr) = (w.next()?, w.next()?);
            (cidr.split('/').next()?.parse::<IpAddr>().ok()? == addr).then(|| iface.trim_end_matches(':').to_string())
        })
        .ok_or_else(|| RealFaultError::Link(format!("no interface of this machine holds {addr}")))
}

/// The whole block device (major, minor) that holds `path` (a partition's disk: the kernel
/// throttles whole devices).
pub fn device_of(path: &Path) -> Result<(u32, u32)> {
    let st = rustix::fs::stat(path).map_err(|_| RealFaultError::NoDevice { path: path.to_path_buf() })?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    if major == 0 {
        return Err(RealFaultError::NoDevice { path: path.to_path_buf() });
    }
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if sys.join("partition").exists()
        && let Ok(parent) = std::fs::read_to_string(sys.join("..").join("dev"))
        && let Some((ma, mi)) = parent.trim().split_once(':')
        && let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse())
    {
        return Ok((ma, mi));
    }
    Ok((major, minor))
}

/// Which hierarchy throttles: v1's `blkio`, else a v2 hierarchy with the `io` controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    V1,
    V2,
}

fn hierarchy_of(group: &Path) -> Hierarchy {
    if group.starts_with(BLKIO_V1) { Hierarchy::V1 } else { Hierarchy::V2 }
}

/// The unified hierarchy that offers `io`, if any.
fn unified_with_io() -> Option<PathBuf> {
    UNIFIED.iter().map(PathBuf::from).find(|root| {
        std::fs::read_to_string(root.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|w| w == "io"))
    })
}

/// Make this server's throttle group and move the server's process into it.
fn make_group(env: &FaultEnv) -> Result<PathBuf> {
    let name = format!("ganges-node{}-{}", env.node.0, std::process::id());
    let (group, hierarchy) = if Path::new(BLKIO_V1).join("cgroup.procs").exists() {
        (Path::new(BLKIO_V1).join(&name), Hierarchy::V1)
    } else if let Some(root) = unified_with_io() {
        // v2 controllers act on a group's children once the parent enables them.
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+io");
        (root.join(&name), Hierarchy::V2)
    } else {
        return Err(RealFaultError::NoController {
            why: format!("neither {BLKIO_V1} (cgroup v1) nor a cgroup v2 hierarchy with the io controller"),
        });
    };
    if let Some(root) = group.parent() {
        remove_stale_groups(root);
    }
    let cg = |what, err| RealFaultError::Cgroup { what, path: group.clone(), err };
    std::fs::create_dir_all(&group).map_err(|e| cg("creating", e))?;
    std::fs::write(group.join("cgroup.procs"), std::process::id().to_string()).map_err(|e| cg("joining", e))?;
    tracing::info!(group = %group.display(), ?hierarchy, "joined a block-I/O throttle group");
    Ok(group)
}

fn write_limits(group: &Path, (major, minor): (u32, u32), read: Option<u64>, write: Option<u64>) -> Result<()> {
    let cg = |path: PathBuf, err| RealFaultError::Cgroup { what: "writing", path, err };
    match hierarchy_of(group) {
        Hierarchy::V1 => {
            for (file, v) in [("blkio.throttle.read_bps_device", read), ("blkio.throttle.write_bps_device", write)] {
                // 0 removes a limit.
                let path = group.join(file);
                std::fs::write(&path, format!("{major}:{minor} {}", v.unwrap_or(0))).map_err(|e| cg(path, e))?;
            }
        }
        Hierarchy::V2 => {
            let v = |x: Option<u64>| x.map_or("max".to_string(), |b| b.to_string());
            let path = group.join("io.max");
            std::fs::write(&path, format!("{major}:{minor} rbps={} wbps={}", v(read), v(write)))
                .map_err(|e| cg(path, e))?;
        }
    }
    Ok(())
}

/// Remove the throttle groups of servers that died without removing theirs (killed, so
/// without running `clear`): empty groups named for a process that no longer exists.
fn remove_stale_groups(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("ganges-node").and_then(|r| r.rsplit_once('-')).map(|(_, pid)| pid) else {
            continue;
        };
        let gone = pid.parse::<u32>().is_ok_and(|p| !Path::new(&format!("/proc/{p}")).exists());
        let empty = std::fs::read_to_string(e.path().join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty());
        if gone && empty && std::fs::remove_dir(e.path()).is_ok() {
            tracing::info!(group = %e.path().display(), "removed the throttle group of a server that is gone");
        }
    }
}

/// Move every process of `group` back to its hierarchy's root and remove it.
fn leave_group(group: &Path) {
    let Some(root) = group.parent() else { return };
    if let Ok(procs) = std::fs::read_to_string(group.join("cgroup.procs")) {
        for pid in procs.split_whitespace() {
            let _ = std::fs::write(root.join("cgroup.procs"), pid);
        }
    }
    if let Err(e) = std::fs::remove_dir(group)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(group = %group.display(), %e, "removing the throttle group");
    }
}

fn start_competitor(share: f64, rate: Option<u64>, env: &FaultEnv, group: Option<&Path>) -> Result<Child> {
    let helper = env.helper.as_ref().ok_or_else(|| {
        RealFaultError::Competitor("this server was started without a helper binary to run it from".into())
    })?;
    device_of(&env.data_dir)?;
    let file = env.data_dir.join(COMPETE_FILE);
    let mut cmd = Command::new(helper);
    cmd.args(["compete", "--file"])
        .arg(&file)
        .args(["--share", &share.to_string(), "--parent", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if let Some(g) = group {
        cmd.arg("--cgroup").arg(g);
    }
    if let Some(r) = rate {
        cmd.args(["--rate", &r.to_string()]);
    }
    let mut child =
        cmd.spawn().map_err(|e| RealFaultError::Competitor(format!("starting {}: {e}", helper.display())))?;
    // The fault is in force once the reader reads, not while it makes its file: wait for its
    // word, at most `COMPETE_READY_WITHIN`.
    let out = child.stdout.take().expect("piped");
    if crate::sys::first_line(out, COMPETE_READY_WITHIN).is_some_and(|l| l.trim() == COMPETE_READY) {
        return Ok(child);
    }
    let why = match child.try_wait() {
        Ok(Some(status)) => format!("the reader on {} ended before it read ({status})", file.display()),
        _ => format!("the reader on {} did not begin within {COMPETE_READY_WITHIN:?}", file.display()),
    };
    let _ = child.kill();
    let _ = child.wait();
    Err(RealFaultError::Competitor(why))
}

/// What the competing reader says on stdout once it reads, and how long the server waits for
/// it: making its 256 MiB file takes a few seconds on a disk, and a client waits a minute for
/// the reply to `fault set`.
const COMPETE_READY: &str = "reading";
const COMPETE_READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(40);

/// Readers of the competing process, each a read in flight: as many as a server keeps at its
/// disk and more, so that the reader gets the pace it asks for from a disk (or a throttle
/// group) that serves requests in turn.
const COMPETE_READERS: usize = 4;

/// The competing reader's own body (`ganges compete`): die with the server, make the file if
/// it is not there, join the server's throttle group (after the file, so that making it
/// neither waits on the throttle nor takes the server's share of it), say `COMPETE_READY` on
/// stdout, then read the file over and over with direct I/O, `COMPETE_READERS` reads at once,
/// at `rate` bytes per second, or else at `share` of the rate of its first half second (flat
/// out when `share` is 1).
pub fn compete(file: &Path, share: f64, rate: Option<u64>, parent: u32, cgroup: Option<&Path>) -> std::io::Result<()> {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    use std::sync::atomic::{AtomicU64, Ordering};
    set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)?;
    if getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent) {
        return Ok(()); // the server is already gone
    }
    const CHUNK: usize = 1 << 20;
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    if size < COMPETE_FILE_BYTES {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(file)?;
        let f = crate::direct::open(file, true)?;
        let chunk: Vec<u8> = (0..CHUNK).map(|i| (i * 131 % 251) as u8).collect();
        for i in 0..COMPETE_FILE_BYTES / CHUNK as u64 {
            crate::direct::write_at(&f, &chunk, i * CHUNK as u64)?;
        }
    }
    if let Some(g) = cgroup {
        std::fs::write(g.join("cgroup.procs"), std::process::id().to_string())?;
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{COMPETE_READY}")?;
        out.flush()?;
    }
    let chunks = COMPETE_FILE_BYTES / CHUNK as u64;
    let started = std::time::Instant::now();
    let read = AtomicU64::new(0);
    // bytes/s once known (0: not yet); with no rate given, measured over the first 0.5 s.
    let pace = AtomicU64::new(rate.unwrap_or(0));
    let reader = |k: u64| -> std::io::Result<()> {
        let f = crate::direct::open(file, false)?;
        let mut i = k;
        loop {
            crate::direct::read_at(&f, (i % chunks) * CHUNK as u64, CHUNK)?;
            i += COMPETE_READERS as u64;
            let done = read.fetch_add(CHUNK as u64, Ordering::Relaxed) + CHUNK as u64;
            let t = started.elapsed().as_secs_f64();
            let mut p = pace.load(Ordering::Relaxed);
            if p == 0 && t >= 0.5 && share < 1.0 {
                p = (share * done as f64 / t) as u64;
                pace.store(p, Ordering::Relaxed);
            }
            if p > 0 {
                let due = done as f64 / p as f64;
                if due > t {
                    std::thread::sleep(std::time::Duration::from_secs_f64(due - t));
                }
            }
        }
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..COMPETE_READERS as u64).map(|k| s.spawn(move || reader(k))).collect();
        // Any reader's error ends the process (the others run until it does).
        for h in handles {
            h.join().unwrap_or_else(|_| Err(std::io::Error::other("a reader panicked")))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_shaping_is_a_token_bucket_or_netem() {
        let tbf = qdisc_args(Some(40 << 20), None);
        assert_eq!(tbf[0], "tbf");
        assert_eq!(tbf[2], format!("{}bit", (40u64 << 20) * 8));
        assert!(tbf[4].parse::<u64>().unwrap() >= 64 << 10);
        assert_eq!(qdisc_args(None, Some(2000)), vec!["netem", "delay", "2000us"]);
        assert_eq!(qdisc_args(Some(1000), Some(5))[3..], ["rate".to_string(), "8000bit".into()]);
    }

    #[test]
    fn a_data_directory_on_a_disk_has_a_device_and_loopback_has_an_interface() {
        // The crate's folder is on a disk here; a tmpfs would have none.
        match device_of(Path::new(env!("CARGO_MANIFEST_DIR"))) {
            Ok((major, _)) => assert!(major > 0),
            Err(e) => eprintln!("SKIPPED: the crate's folder is on no block device ({e})"),
        }
        assert_eq!(interface_of("127.0.0.1".parse().unwrap()).unwrap(), "lo");
        assert!(interface_of("192.0.2.77".parse().unwrap()).is_err(), "TEST-NET-1 is nobody's");
    }
}
