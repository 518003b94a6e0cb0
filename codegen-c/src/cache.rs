//! Keeps a kernel cache folder under a size bound: each hit marks its files
//! used ([`touch`]), and each new entry drops the files used least recently
//! once the folder is past the bound ([`after_new_entry`], which lists the
//! folder on a process's first new entry and every 32nd after it).
//!
//! A sweep compiles a kernel per point, and a sanitized CUDA emulation is
//! about 800 KB an executable: the caches grew without end (421 MB on the
//! build machine after a few weeks of tests). The bound is
//! `$SPINDLE_CACHE_MAX_MB` megabytes a folder (default 2048; 0 keeps
//! everything).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The environment variable bounding each cache folder, in megabytes.
pub const MAX_MB_ENV: &str = "SPINDLE_CACHE_MAX_MB";

/// The bound when `$SPINDLE_CACHE_MAX_MB` is not set: 2 GiB a folder.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// Files used this recently stay whatever the size: another process may
/// have found them and be about to load or run them.
const IN_USE: Duration = Duration::from_secs(600);

/// `$SPINDLE_CACHE_MAX_MB` in bytes (`None`: unbounded), else
/// [`DEFAULT_MAX_BYTES`]. A value that is not a number is the default.
pub fn max_bytes() -> Option<u64> {
    match std::env::var(MAX_MB_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(0) => None,
        Some(mb) => Some(mb.saturating_mul(1 << 20)),
        None => Some(DEFAULT_MAX_BYTES),
    }
}

/// Marks a cached file used now (its modification time). Opened for
/// reading only: an executable opened for writing cannot be run.
pub fn touch(path: &Path) {
    let _ = File::open(path).and_then(|f| f.set_modified(SystemTime::now()));
}

/// New entries a process adds to a folder between two listings of it: a
/// folder of small C kernels holds tens of thousands of files under the
/// default bound, too many to list on every compile, and the bound is soft
/// (32 more entries are a few megabytes past it at most).
const ENTRIES_PER_PRUNE: u64 = 32;

/// Call after adding an entry to `dir`: [`prune`]s it on this process's
/// first new entry there and every [`ENTRIES_PER_PRUNE`]th after it.
/// Returns the bytes removed.
pub fn after_new_entry(dir: &Path, max: Option<u64>) -> u64 {
    static ADDED: Mutex<BTreeMap<PathBuf, u64>> = Mutex::new(BTreeMap::new());
    let due = {
        let mut added = ADDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = added.entry(dir.to_path_buf()).or_insert(0);
        *count += 1;
        (*count - 1).is_multiple_of(ENTRIES_PER_PRUNE)
    };
    if due { prune(dir, max) } else { 0 }
}

/// Whether `name` is a cache entry's: a 32-digit hex key, alone or with an
/// extension (`autotune.json` and other files beside the entries stay).
fn is_entry(name: &str) -> bool {
    let key = name.split_once('.').map_or(name, |(key, _)| key);
    key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

/// When the entries of `dir` (not its other files or folders) hold more
/// than `max` bytes,
/// removes the least recently used until they hold at most three quarters
/// of it, keeping those used in the last ten minutes. Returns the bytes
/// removed. Errors are ignored: the cache is an optimisation, and another
/// process may be pruning the same folder.
pub fn prune(dir: &Path, max: Option<u64>) -> u64 {
    let Some(max) = max else { return 0 };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut files: Vec<(SystemTime, u64, std::path::PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            is_entry(e.file_name().to_str()?).then_some(())?;
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    if total <= max {
        return 0;
    }
    files.sort_by_key(|f| f.0);
    let recent = SystemTime::now().checked_sub(IN_USE).unwrap_or(SystemTime::UNIX_EPOCH);
    let target = max / 4 * 3;
    let mut removed = 0;
    for (modified, len, path) in files {
        if total <= target || modified > recent {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
            removed += len;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, bytes: usize, age_s: u64) {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_s);
        File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
    }

    #[test]
    fn pruning_drops_the_least_recently_used_files_and_keeps_recent_ones() {
        let dir = std::env::temp_dir().join(format!("spindle-cache-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let key = |n: u8| format!("{:032x}", n);
        file(&dir, &format!("{}.so", key(1)), 400, 4000);
        file(&dir, &key(2), 400, 3000);
        file(&dir, &format!("{}.c", key(3)), 400, 2000);
        file(&dir, &key(4), 400, 10);
        // Not an entry, however old and large.
        file(&dir, "autotune.json", 4000, 9000);
        // Under the bound: nothing goes.
        assert_eq!(prune(&dir, Some(1600)), 0);
        assert_eq!(prune(&dir, None), 0);
        // Past the bound (1600 > 1500), down to three quarters of it
        // (1125): the two oldest go.
        assert_eq!(prune(&dir, Some(1500)), 800);
        // A hit makes the third recent: past any bound, the entries used in
        // the last ten minutes stay (without the touch it would go).
        touch(&dir.join(format!("{}.c", key(3))));
        assert_eq!(prune(&dir, Some(100)), 0);
        let left: Vec<String> = {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(left, [key(3) + ".c", key(4), "autotune.json".into(), "sub".into()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn new_entries_list_the_folder_on_the_first_and_every_32nd() {
        let dir = std::env::temp_dir().join(format!("spindle-cache-after-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let old = |n: u8| file(&dir, &format!("{:032x}", n), 400, 4000);
        old(1);
        assert_eq!(after_new_entry(&dir, Some(100)), 400);
        old(2);
        for _ in 1..ENTRIES_PER_PRUNE {
            assert_eq!(after_new_entry(&dir, Some(100)), 0);
        }
        assert_eq!(after_new_entry(&dir, Some(100)), 400);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
