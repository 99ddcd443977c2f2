//! System calls the standard library does not offer as we need them: resource use of this
//! process (CPU time and memory, for stats and benchmarks), positional reads into memory
//! that is not zeroed first, and a child's first line of output within a time limit.

use rustix::buffer::spare_capacity;
use rustix::io::Errno;
use std::fs::File;
use std::io;

/// The first line a child prints on stdout, if it prints one within `timeout` (`None` also
/// when it closes stdout first). Read on a thread of its own, which then drains the rest so
/// that a child printing more never blocks on a full pipe.
pub fn first_line(stdout: std::process::ChildStdout, timeout: std::time::Duration) -> Option<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut r = std::io::BufReader::new(stdout);
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    rx.recv_timeout(timeout).ok().filter(|l| !l.is_empty())
}

/// User + system CPU seconds this process has used.
pub fn cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Read exactly `len` bytes of `file` at `offset` into a new buffer. `FileExt::read_exact_at`
/// needs initialised memory, so a block read through it was zeroed first and then overwritten:
/// a memset of every block served, a few percent of a server's CPU in a profile of `bench scan`.
/// `pread` into the buffer's spare capacity (rustix's, which counts as read only what the
/// call returned) skips that.
pub fn read_exact_at(file: &File, len: usize, offset: u64) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, spare_capacity(&mut buf), at) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The allocator may have given more room than asked, and the read filled it.
    buf.truncate(len);
    Ok(buf)
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
    fn a_positional_read_returns_the_bytes_at_its_offset_or_fails_past_the_end() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        assert_eq!(super::read_exact_at(&f, 4096, 1000).unwrap(), &data[1000..5096]);
        assert_eq!(super::read_exact_at(&f, 0, 10_000).unwrap(), Vec::<u8>::new());
        let past = super::read_exact_at(&f, 100, 9_950).unwrap_err();
        assert_eq!(past.kind(), std::io::ErrorKind::UnexpectedEof);
    }

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
