//! Create-if-absent of a journal entry in a local directory, in two steps: the bytes are
//! written and synced under a staged name ([`stage`]), then linked to the entry's name
//! ([`Staged::publish`]). object_store's `PutMode::Create` does both at once; split, the
//! first step runs while the writes the entry names (the originals' pack) are still under
//! way, and only the link waits for them. On a session's first turn that takes the entry's
//! write and fsync (and the journal folder's creation) off the path the client waits on.
//! [`make_folder`] does the same for the folder of a session's first pack: made while the
//! pack is planned, not when it is put.
//!
//! The files are what object_store writes and reads: the staged name holds a `#` (which it
//! never lists, and which compaction sweeps as a crash leftover), the link fails when the
//! entry exists, and every directory entry made is fsynced before the entry counts as
//! written.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use foldwire_core::StoreError;
use tokio::task::JoinHandle;

use crate::payload;

/// Tells staged files of one process apart.
static STAGED: AtomicU64 = AtomicU64::new(0);

/// An entry's bytes written and synced under a staged name, not yet linked to the entry's
/// name. Dropped unpublished, the staged file is removed.
#[derive(Debug)]
pub struct Staged {
    /// The staged file; `None` once published or removed.
    staged: Option<PathBuf>,
}

/// Writes `pieces`, in order, beside `dest` and syncs them ([`payload::write_synced`]),
/// creating `dest`'s folder (durably) when it is missing.
///
/// # Errors
/// The folder could not be made, or the file not written or synced.
pub fn stage(
    dest: &Path,
    pieces: impl IntoIterator<Item = impl AsRef<[u8]>>,
) -> io::Result<Staged> {
    let (folder, name) = match (dest.parent(), dest.file_name()) {
        (Some(folder), Some(name)) => (folder, name),
        _ => return Err(io::Error::new(ErrorKind::InvalidInput, "not a file's path")),
    };
    let staged = staged_name(folder, name);
    let mut file = match create_new(&staged) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            make_folder(folder)?;
            create_new(&staged)?
        }
        other => other?,
    };
    // From here on the staged file exists: dropping `entry` on an error removes it.
    let entry = Staged {
        staged: Some(staged),
    };
    payload::write_synced(&mut file, pieces)?;
    drop(file);
    Ok(entry)
}

impl Staged {
    /// Links the staged file to `dest` (the name it was staged beside) and makes the link
    /// durable; `false` (and nothing changed) when `dest` already exists: another writer
    /// created it first.
    ///
    /// # Errors
    /// The link, or the fsync of the folder, failed.
    pub fn publish(mut self, dest: &Path) -> io::Result<bool> {
        let Some(staged) = self.staged.take() else {
            return Ok(false);
        };
        let linked = std::fs::hard_link(&staged, dest);
        let _ = std::fs::remove_file(&staged);
        match linked {
            Ok(()) => {
                sync_parent(dest)?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(staged) = self.staged.take() {
            let _ = std::fs::remove_file(staged);
        }
    }
}

/// `<name>#fw<process>.<n>` in `folder`: no other writer picks it, and object_store lists
/// no name with a `#`.
fn staged_name(folder: &Path, name: &std::ffi::OsStr) -> PathBuf {
    let mut staged = name.to_owned();
    staged.push(format!(
        "#fw{}.{}",
        std::process::id(),
        STAGED.fetch_add(1, Ordering::Relaxed)
    ));
    folder.join(staged)
}

fn create_new(path: &Path) -> io::Result<File> {
    File::options().write(true).create_new(true).open(path)
}

/// Creates `folder` and those above it that are missing, and fsyncs each folder whose
/// entries changed, up to the deepest one that existed, so a power loss cannot drop them
/// from under a file written in them. Nothing to do when `folder` exists.
///
/// # Errors
/// A folder could not be created or synced.
pub fn make_folder(folder: &Path) -> io::Result<()> {
    if folder.is_dir() {
        return Ok(());
    }
    let mut existing = folder;
    while !existing.exists() {
        match existing.parent() {
            Some(p) => existing = p,
            None => break,
        }
    }
    std::fs::create_dir_all(folder)?;
    let mut dir = folder;
    loop {
        sync_dir(dir)?;
        if dir == existing {
            return Ok(());
        }
        match dir.parent() {
            Some(p) => dir = p,
            None => return Ok(()),
        }
    }
}

/// What file work run on a blocking thread ended in, its failure (or the thread's) as the
/// `backend`'s failure to do `operation`.
///
/// # Errors
/// The work failed, or its thread stopped.
pub async fn finished<T>(
    work: JoinHandle<io::Result<T>>,
    backend: &str,
    operation: &str,
) -> Result<T, StoreError> {
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Backend {
        backend: backend.to_owned(),
        operation: operation.to_owned(),
        source,
    };
    work.await
        .map_err(|e| failed(Box::new(e)))?
        .map_err(|e| failed(Box::new(e)))
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_published_entry_holds_the_bytes_and_leaves_no_staged_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("sessions/s/journal/1.json");
        let staged = stage(&dest, [b"entry".as_slice()]).unwrap();
        assert!(!dest.exists(), "not in place before it is published");
        assert!(staged.publish(&dest).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"entry");
        let names: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("1.json")]);
    }

    #[test]
    fn the_second_of_two_writers_loses_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("journal/2.json");
        let first = stage(&dest, [b"first".as_slice()]).unwrap();
        let second = stage(&dest, [b"second".as_slice()]).unwrap();
        assert!(first.publish(&dest).unwrap());
        assert!(!second.publish(&dest).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"first");
        assert_eq!(
            std::fs::read_dir(dir.path().join("journal"))
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn a_folder_is_made_with_those_above_it_and_made_again_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("sessions/s/packs");
        make_folder(&folder).unwrap();
        assert!(folder.is_dir());
        std::fs::write(folder.join("p"), b"x").unwrap();
        make_folder(&folder).unwrap();
        assert_eq!(std::fs::read(folder.join("p")).unwrap(), b"x");
    }

    #[test]
    fn an_entry_never_published_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("journal/3.json");
        drop(stage(&dest, [b"abandoned".as_slice()]).unwrap());
        assert_eq!(
            std::fs::read_dir(dir.path().join("journal"))
                .unwrap()
                .count(),
            0
        );
    }
}
