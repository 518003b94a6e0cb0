//! Where the shared real data lives. Files there are read in place and never
//! copied into the project.

use std::path::PathBuf;

/// The shared data folder: `$SPINDLE_DATA` when set, else `../shared/data`
/// beside the workspace. `None` when it does not exist, so callers can skip
/// or fall back to generated data.
pub fn shared_data_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("SPINDLE_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
    };
    dir.is_dir().then_some(dir)
}

/// A file under the shared data folder, when the folder and the file exist.
pub fn shared_file(relative: &str) -> Option<PathBuf> {
    let path = shared_data_dir()?.join(relative);
    path.is_file().then_some(path)
}

/// Every `.mtx` file in `shared/data/matrices`, sorted by name.
pub fn shared_matrices() -> Vec<PathBuf> {
    let Some(dir) = shared_data_dir() else { return Vec::new() };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("matrices"))
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "mtx"))
        .collect();
    files.sort();
    files
}
