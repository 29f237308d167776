//! Files tracer writes (`--record`, `--pcap`, `--ready-file`) and reads
//! (recordings, `tracer merge`'s JSON), opened so that a path planted by
//! someone else cannot redirect them: symbolic links are never followed
//! (O_NOFOLLOW), an existing regular file is never truncated unless
//! `--force` says so, the ready file is always a new file of ours
//! (O_EXCL), and inputs must be regular files of a bounded size.

use std::{
    fs::{File, OpenOptions},
    io::Read,
    os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

/// The most an input file (a recording, a run's JSON) may hold: read
/// whole, it is kept in memory.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Why an output file could not be opened, or an input read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path} exists: refusing to overwrite it (--force replaces it)")]
    Exists { path: PathBuf },
    #[error("{path} is a symbolic link: refusing to follow it (name the file itself)")]
    Symlink { path: PathBuf },
    #[error("{path} is given for both {first} and {second}: each needs a file of its own")]
    SamePath {
        path: PathBuf,
        first: &'static str,
        second: &'static str,
    },
    #[error("{path} is {what}, not a regular file: tracer reads recordings and JSON from files")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{path} is {size} bytes, more than tracer reads ({MAX_INPUT_BYTES} bytes)")]
    TooBig { path: PathBuf, size: u64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl FileError {
    /// A bad path given on the command line (exit 2), not a failure of
    /// the system (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(self, FileError::Io { .. })
    }
}

impl From<FileError> for std::io::Error {
    /// The error as an I/O error (its line kept), for callers that report
    /// I/O errors.
    fn from(e: FileError) -> std::io::Error {
        match e {
            FileError::Io { source, .. } => source,
            e => std::io::Error::other(e.to_string()),
        }
    }
}

/// Whether an existing regular file may be replaced (`--force`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    Refuse,
    Replace,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| {
        if source.raw_os_error() == Some(libc::ELOOP) {
            FileError::Symlink { path: path.into() }
        } else {
            FileError::Io {
                path: path.into(),
                source,
            }
        }
    }
}

/// Open `path` to write, never through a symbolic link: a new file
/// (mode 0644), else an existing one that is not a regular file (a FIFO,
/// /dev/null), else, with [`Overwrite::Replace`], an existing regular
/// file emptied.
pub fn create(path: &Path, overwrite: Overwrite) -> Result<File, FileError> {
    let fresh = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path);
    match fresh {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(path)(e)),
    }
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(io(path))?;
    let meta = f.metadata().map_err(io(path))?;
    if meta.file_type().is_file() {
        if overwrite == Overwrite::Refuse {
            return Err(FileError::Exists { path: path.into() });
        }
        f.set_len(0).map_err(io(path))?;
    }
    set_blocking(&f).map_err(io(path))?;
    Ok(f)
}

/// Whether [`create`] would refuse `path` (a symbolic link, an existing
/// regular file without [`Overwrite::Replace`]), said before any output
/// is created: a refusal then leaves no file behind.
pub fn check_output(path: &Path, overwrite: Overwrite) -> Result<(), FileError> {
    let Ok(m) = path.symlink_metadata() else {
        return Ok(());
    };
    if m.file_type().is_symlink() {
        return Err(FileError::Symlink { path: path.into() });
    }
    if m.file_type().is_file() && overwrite == Overwrite::Refuse {
        return Err(FileError::Exists { path: path.into() });
    }
    Ok(())
}

fn set_blocking(f: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd this File owns, with integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Create `path` as a new file (O_EXCL, never through a symbolic link):
/// what tracer creates this way is its own to remove.
pub fn create_new(path: &Path) -> Result<File, FileError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => FileError::Exists { path: path.into() },
            _ => io(path)(e),
        })
}

/// Refuse two outputs (or an output and an input) named by one path.
pub fn distinct(paths: &[(&'static str, Option<&Path>)]) -> Result<(), FileError> {
    let given: Vec<(&'static str, &Path)> = paths
        .iter()
        .filter_map(|(n, p)| Some((*n, (*p)?)))
        .collect();
    for (i, (first, a)) in given.iter().enumerate() {
        for (second, b) in &given[i + 1..] {
            if same_file(a, b) {
                return Err(FileError::SamePath {
                    path: (*b).into(),
                    first,
                    second,
                });
            }
        }
    }
    Ok(())
}

/// The same path once made absolute, or the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    if std::path::absolute(a).ok() == std::path::absolute(b).ok() {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// What a file that is not a regular file is, for the error line.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Read an input file whole: a regular file (FIFOs and devices refused
/// without blocking on them) of at most [`MAX_INPUT_BYTES`].
pub fn read_input(path: &Path) -> Result<Vec<u8>, FileError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| FileError::Io {
            path: path.into(),
            source,
        })?;
    let meta = f.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular {
            path: path.into(),
            what: kind_of(meta.file_type()),
        });
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(FileError::TooBig {
            path: path.into(),
            size: meta.len(),
        });
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    // A file growing while read is bounded too.
    f.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(io(path))?;
    if data.len() as u64 > MAX_INPUT_BYTES {
        return Err(FileError::TooBig {
            path: path.into(),
            size: data.len() as u64,
        });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tracer-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn outputs_refuse_links_and_keep_existing_files() {
        let d = dir("out");
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for o in [Overwrite::Refuse, Overwrite::Replace] {
            let e = create(&link, o).unwrap_err();
            assert!(matches!(e, FileError::Symlink { .. }), "{e}");
        }
        let e = create(&victim, Overwrite::Refuse).unwrap_err();
        assert!(matches!(e, FileError::Exists { .. }) && e.is_usage(), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        create(&victim, Overwrite::Replace).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "");
        assert!(create(&d.join("new"), Overwrite::Refuse).is_ok());
        // Not a regular file: written to, nothing truncated.
        assert!(create(Path::new("/dev/null"), Overwrite::Refuse).is_ok());
        let e = create_new(&victim).unwrap_err();
        assert!(matches!(e, FileError::Exists { .. }), "{e}");
        let e = create_new(&link).unwrap_err();
        assert!(matches!(e, FileError::Exists { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn one_path_for_two_outputs_is_refused() {
        let a = Path::new("x.rec");
        let e = distinct(&[
            ("--record", Some(a)),
            ("--pcap", Some(Path::new("./x.rec"))),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "./x.rec is given for both --record and --pcap: each needs a file of its own"
        );
        assert!(distinct(&[("--record", Some(a)), ("--pcap", None)]).is_ok());
        assert!(distinct(&[("--record", Some(a)), ("--pcap", Some(Path::new("y")))]).is_ok());
    }

    #[test]
    fn inputs_must_be_bounded_regular_files() {
        let e = read_input(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file: tracer reads recordings and JSON from files"
        );
        let d = dir("in");
        let big = d.join("big");
        File::create(&big)
            .unwrap()
            .set_len(MAX_INPUT_BYTES + 1)
            .unwrap();
        assert!(matches!(read_input(&big), Err(FileError::TooBig { .. })));
        let e = read_input(&d).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        std::fs::write(d.join("ok"), "abc").unwrap();
        assert_eq!(read_input(&d.join("ok")).unwrap(), b"abc");
        let _ = std::fs::remove_dir_all(&d);
    }
}
