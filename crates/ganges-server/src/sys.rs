//! Resource use of this process: CPU time and memory, for stats and benchmarks.

/// User + system CPU seconds this process has used.
#[allow(unsafe_code)]
pub fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the struct we pass and reads nothing else; a zeroed
    // rusage is a valid value of a plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// (resident set size, peak resident set size) in bytes, from /proc (0 where unavailable).
pub fn rss_bytes() -> (u64, u64) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return (0, 0);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_uses_cpu_and_memory() {
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(super::cpu_secs() > 0.0);
        let (rss, peak) = super::rss_bytes();
        assert!(rss > 0 && peak >= rss);
    }
}
