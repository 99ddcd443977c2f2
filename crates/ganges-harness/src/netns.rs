//! Hosts of their own on one machine: each server of a local cluster in a network namespace
//! with its own address, on a bridge, so traffic between clients and servers really crosses
//! a network (veth pairs, a Linux bridge), and a link fault (`tc`) slows one host's link.
//!
//! ```text
//!   root namespace: bridge gbr-PID 10.213.X.1/24 ── veth gvPID-0 ── [ns 0] eth0 10.213.X.2
//!                                                ── veth gvPID-1 ── [ns 1] eth0 10.213.X.3 ...
//! ```
//! A namespace is created under a name, its server is started inside it (`nsenter`, which
//! enters the network namespace only, so the server still sees the machine's cgroups), and
//! the name is then removed: the namespace lives exactly as long as its server, and its veth
//! pair goes with it. What is left when the supervisor is killed outright is the bridge, and
//! the next `local up --netns` removes bridges whose supervisor is gone.

use crate::error::{HarnessError, HarnessResult};
use std::net::Ipv4Addr;
use std::process::Command;

/// The subnet's first two octets: 10.213.X.0/24, X the first free one.
const PREFIX: [u8; 2] = [10, 213];
/// Node k's address is .(k + HOST_BASE); the bridge has .1.
const HOST_BASE: u32 = 2;
/// The most nodes a /24 holds after the bridge.
pub const NODES_MAX: u32 = 250;
/// The port every server listens on (each has an address of its own).
pub const PORT: u16 = 7070;

/// Run a command, failing with its stderr.
fn run(program: &str, args: &[&str]) -> HarnessResult<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| HarnessError::System(format!("running {program}: {e} (install iproute2 and util-linux)")))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(HarnessError::System(format!("{program} {}: {}", args.join(" "), why.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why this machine cannot run a netns cluster, if it cannot.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("--netns needs root (creating network namespaces, veth pairs and a bridge)".into());
    }
    for tool in ["ip", "nsenter"] {
        if Command::new(tool).arg("-V").output().is_err() && Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("--netns needs `{tool}` (apt-get install iproute2 util-linux)"));
        }
    }
    let probe = format!("gprobe-{}", std::process::id());
    if let Err(e) = run("ip", &["netns", "add", &probe]) {
        return Some(format!("this machine does not let us make a network namespace: {e}"));
    }
    let _ = run("ip", &["netns", "delete", &probe]);
    None
}

/// One namespace host, before and after its server starts.
#[derive(Debug, Clone)]
pub struct Host {
    /// The namespace's name while it has one (`nsenter` enters it by this name).
    pub netns: String,
    pub ip: Ipv4Addr,
    /// The root side of its veth pair (on the bridge).
    pub veth: String,
}

impl Host {
    pub fn addr(&self) -> String {
        format!("{}:{PORT}", self.ip)
    }

    /// The path `nsenter --net=` takes.
    pub fn netns_path(&self) -> String {
        format!("/var/run/netns/{}", self.netns)
    }
}

/// The bridge and hosts of one cluster. Dropping it removes the bridge (and any namespace
/// still named), which also takes the veth pairs of servers that have exited.
#[derive(Debug)]
pub struct Network {
    pub bridge: String,
    pub hosts: Vec<Host>,
}

/// Remove bridges left by supervisors that are gone.
fn remove_stale_bridges() {
    let Ok(links) = run("ip", &["-o", "link", "show", "type", "bridge"]) else { return };
    for line in links.lines() {
        let Some(name) = line.split(':').nth(1).map(str::trim) else { continue };
        let Some(pid) = name.strip_prefix("gbr-").and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !crate::sys::alive(pid) {
            tracing::info!(bridge = name, "removing the bridge of a local cluster whose supervisor is gone");
            let _ = run("ip", &["link", "delete", name]);
        }
    }
}

/// The first 10.213.X.0/24 no interface of this machine uses.
fn free_subnet() -> HarnessResult<u8> {
    let used = run("ip", &["-o", "-4", "addr", "show"])?;
    (0..=255u8)
        .find(|x| !used.contains(&format!("{}.{}.{x}.", PREFIX[0], PREFIX[1])))
        .ok_or_else(|| HarnessError::System("every 10.213.X.0/24 subnet is in use on this machine".into()))
}

impl Network {
    /// Make a bridge and `nodes` namespaces, each with its address, for the process `owner`
    /// (whose pid names the bridge, so a later `up` can tell whether it is stale).
    pub fn create(nodes: u32, owner: u32) -> HarnessResult<Network> {
        if let Some(why) = unavailable() {
            return Err(HarnessError::System(why));
        }
        if nodes > NODES_MAX {
            return Err(HarnessError::Spec(format!(
                "--netns clusters have at most {NODES_MAX} nodes (one /24 subnet)"
            )));
        }
        remove_stale_bridges();
        let x = free_subnet()?;
        let ip = |host: u32| Ipv4Addr::new(PREFIX[0], PREFIX[1], x, host as u8);
        let bridge = format!("gbr-{owner}");
        let mut net = Network { bridge: bridge.clone(), hosts: vec![] };
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &format!("{}/24", ip(1)), "dev", &bridge])?;
        run("ip", &["link", "set", &bridge, "up"])?;
        for k in 0..nodes {
            let host =
                Host { netns: format!("gns-{owner}-{k}"), ip: ip(k + HOST_BASE), veth: format!("gv{owner}-{k}") };
            run("ip", &["netns", "add", &host.netns])?;
            net.hosts.push(host.clone());
            run("ip", &["link", "add", &host.veth, "type", "veth", "peer", "name", "eth0", "netns", &host.netns])?;
            run("ip", &["link", "set", &host.veth, "master", &bridge, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &host.netns, "ip"];
                all.extend_from_slice(args);
                run("ip", &all)
            };
            inside(&["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"])?;
            inside(&["link", "set", "eth0", "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Remove the namespaces' names once their servers run inside them: from then on each
    /// lives as long as its server.
    pub fn release_names(&self) {
        for h in &self.hosts {
            let _ = run("ip", &["netns", "delete", &h.netns]);
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.release_names();
        let _ = run("ip", &["link", "delete", &self.bridge]);
    }
}
