//! Direct I/O (`ganges serve --direct-io`): reads and writes that bypass the page cache, so
//! the disk a server measures and serves at is the disk, not memory (and a kernel throttle
//! on the server's process holds for every read).
//!
//! O_DIRECT wants the file offset, the length and the buffer's address aligned to the
//! device's logical block; [`ALIGN`] (4 KiB) satisfies every device in use. A read is widened
//! to aligned bounds and the bytes asked for are a slice of it (no copy); a write of an
//! aligned range is copied once into an aligned buffer. Writes that are not aligned (the
//! short last block of a fragment) go through the page cache, which stays coherent with
//! direct reads of the same file.

use bytes::Bytes;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The alignment of offsets, lengths and buffers for direct I/O.
pub const ALIGN: usize = 4096;

/// Open `path` for direct I/O (read-only, or read and write).
pub fn open(path: &Path, write: bool) -> io::Result<File> {
    let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
    let fd = rustix::fs::open(path, access | OFlags::DIRECT | OFlags::CLOEXEC, Mode::empty())?;
    Ok(File::from(fd))
}

/// Check that `dir`'s file system takes direct I/O, with a probe file written and read back.
pub fn probe(dir: &Path) -> io::Result<()> {
    let path = dir.join(".direct-io-probe");
    std::fs::write(&path, [])?;
    let result = (|| {
        let f = open(&path, true)?;
        write_at(&f, &[7u8; ALIGN], 0)?;
        let back = read_at(&f, 0, ALIGN)?;
        if back.iter().any(|&b| b != 7) {
            return Err(io::Error::other("a direct read did not return what a direct write wrote"));
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// Whether a write at `offset` of `len` bytes can go direct.
pub fn aligned(offset: u64, len: usize) -> bool {
    offset.is_multiple_of(ALIGN as u64) && len.is_multiple_of(ALIGN) && len > 0
}

/// A zeroed buffer with room for `len` bytes at an aligned address; returns it and where
/// the aligned part starts. (Large zeroed allocations come from fresh pages, so the zeroing
/// costs nothing beyond the page faults the read takes anyway.)
fn aligned_buf(len: usize) -> (Vec<u8>, usize) {
    let buf = vec![0u8; len + ALIGN];
    let pad = buf.as_ptr().align_offset(ALIGN);
    (buf, pad)
}

/// Read `len` bytes at `offset` with direct I/O. Fails with `UnexpectedEof` if the file
/// ends before `offset + len`.
pub fn read_at(file: &File, offset: u64, len: usize) -> io::Result<Bytes> {
    let start = offset - offset % ALIGN as u64;
    let end = (offset + len as u64).next_multiple_of(ALIGN as u64);
    let span = (end - start) as usize;
    let (mut buf, pad) = aligned_buf(span);
    let mut got = 0;
    while got < span {
        // Reads stay aligned: each is a whole number of ALIGN blocks from an aligned offset,
        // and a short read only happens at the end of the file.
        match file.read_at(&mut buf[pad + got..pad + span], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if !got.is_multiple_of(ALIGN) {
            break;
        }
    }
    let skip = (offset - start) as usize;
    if got < skip + len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Bytes::from(buf).slice(pad + skip..pad + skip + len))
}

/// Write `data` at `offset` with direct I/O; both must be [`aligned`].
pub fn write_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    debug_assert!(aligned(offset, data.len()), "direct writes are aligned");
    let (mut buf, pad) = aligned_buf(data.len());
    buf[pad..pad + data.len()].copy_from_slice(data);
    file.write_all_at(&buf[pad..pad + data.len()], offset)
}

/// The calibration file, in the data directory.
pub const CALIBRATE_FILE: &str = "calibrate.bin";
/// The unit calibration reads and writes in: a block of the default size.
const CALIBRATE_CHUNK: usize = 1 << 20;

/// Measure the disk under `dir` with direct I/O: write a calibration file of `bytes` when
/// `write` is set or there is not one that large (timing the writes), then read it, round
/// and round, for `seconds` (timing the reads). The file stays for later calibrations.
pub fn calibrate(dir: &Path, bytes: u64, seconds: f64, write: bool) -> io::Result<ganges_proto::control::Calibration> {
    let path = dir.join(CALIBRATE_FILE);
    let chunks = bytes.div_ceil(CALIBRATE_CHUNK as u64).max(1);
    let size = chunks * CALIBRATE_CHUNK as u64;
    let mut write_bytes_per_sec = None;
    if write || std::fs::metadata(&path).map_or(0, |m| m.len()) < size {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        let f = open(&path, true)?;
        let chunk: Vec<u8> = (0..CALIBRATE_CHUNK).map(|i| (i * 89 % 253) as u8).collect();
        let t = std::time::Instant::now();
        for i in 0..chunks {
            write_at(&f, &chunk, i * CALIBRATE_CHUNK as u64)?;
        }
        f.sync_all()?;
        write_bytes_per_sec = Some(size as f64 / t.elapsed().as_secs_f64());
    }
    let f = open(&path, false)?;
    let t = std::time::Instant::now();
    let mut read = 0u64;
    // Round and round the file until `seconds` have passed (direct reads: no cache helps).
    'reading: loop {
        for i in 0..chunks {
            read_at(&f, i * CALIBRATE_CHUNK as u64, CALIBRATE_CHUNK)?;
            read += CALIBRATE_CHUNK as u64;
            if t.elapsed().as_secs_f64() >= seconds {
                break 'reading;
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    Ok(ganges_proto::control::Calibration {
        read_bytes_per_sec: read as f64 / secs,
        write_bytes_per_sec,
        read_bytes: read,
        seconds: secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder on a file system that takes direct I/O: the temp folder, else (where it is a
    /// tmpfs, which does not) the crate's own folder; the test says so if neither does.
    pub(crate) fn dir() -> Option<tempfile::TempDir> {
        for parent in [std::env::temp_dir(), env!("CARGO_MANIFEST_DIR").into()] {
            if let Ok(d) = tempfile::tempdir_in(&parent)
                && probe(d.path()).is_ok()
            {
                return Some(d);
            }
        }
        eprintln!("SKIPPED: neither the temp folder nor the crate's folder takes direct I/O (O_DIRECT)");
        None
    }

    #[test]
    fn direct_reads_of_any_range_return_the_bytes_written() {
        let Some(d) = dir() else { return };
        let path = d.path().join("f");
        let data: Vec<u8> = (0..3 * ALIGN + 100).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = open(&path, false).unwrap();
        for (off, len) in [(0, ALIGN), (5, 100), (ALIGN - 1, 2), (100, 3 * ALIGN), (3 * ALIGN, 100)] {
            assert_eq!(&read_at(&f, off as u64, len).unwrap()[..], &data[off..off + len], "{off}+{len}");
        }
        assert_eq!(read_at(&f, 3 * ALIGN as u64, 101).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_calibration_writes_its_file_once_and_reads_it() {
        let Some(d) = dir() else { return };
        let first = calibrate(d.path(), 8 << 20, 0.2, false).unwrap();
        assert!(first.write_bytes_per_sec.is_some_and(|w| w > 0.0));
        assert!(first.read_bytes >= 8 << 20 && first.seconds >= 0.2, "{first:?}");
        let again = calibrate(d.path(), 8 << 20, 0.2, false).unwrap();
        assert_eq!(again.write_bytes_per_sec, None, "the file is kept");
        assert!(again.read_bytes_per_sec > 0.0);
        assert!(calibrate(d.path(), 8 << 20, 0.2, true).unwrap().write_bytes_per_sec.is_some(), "asked to write");
    }

    #[test]
    fn aligned_writes_go_direct_and_read_back() {
        let Some(d) = dir() else { return };
        let path = d.path().join("w");
        std::fs::write(&path, vec![0u8; 4 * ALIGN]).unwrap();
        let f = open(&path, true).unwrap();
        let block = vec![9u8; 2 * ALIGN];
        write_at(&f, &block, ALIGN as u64).unwrap();
        assert_eq!(&read_at(&f, ALIGN as u64, 2 * ALIGN).unwrap()[..], &block[..]);
        assert!(aligned(0, ALIGN) && !aligned(1, ALIGN) && !aligned(0, 100) && !aligned(0, 0));
    }
}
