//! The explorer in a real terminal: the `spindle` binary in a detached tmux
//! session of fixed size, driven with send-keys and read with capture-pane.
//!
//! tmux is needed; without it the tests print `SKIPPED: tmux not found`,
//! except under CI=true, where they fail (CI installs tmux).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long a cell may take in a debug build on a busy two-core machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const KEY_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether tmux is here; fails under CI, where it must be.
fn have_tmux() -> bool {
    let found = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tmux not found: CI must install it (apt-get install -y tmux)"
        );
        println!("SKIPPED: tmux not found");
    }
    found
}

/// One tmux server of our own (its own socket), killed on drop even when a
/// check fails, so no session outlives the test.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str, dir: &Path, command: &str) -> Tmux {
        let tmux = Tmux { socket: format!("spindle-smoke-{}-{name}", std::process::id()) };
        // The pane runs a shell that reports the exit code and stays a
        // moment, so the test sees that the screen came back.
        let script = format!("{command}; echo \"EXIT=$?\"; sleep 30");
        let out = tmux.cmd(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "smoke",
            "-x",
            "120",
            "-y",
            "40",
            "-c",
            &dir.to_string_lossy(),
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().unwrap()
    }

    fn keys(&self, keys: &[&str]) {
        for key in keys {
            let out = self.cmd(&["send-keys", "-t", "smoke", key]);
            assert!(out.status.success(), "send-keys {key}: {}", String::from_utf8_lossy(&out.stderr));
            // One key at a time, as typed: the explorer reads each separately.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "smoke"]).stdout).into_owned()
    }

    /// Polls the screen until `ready` holds; panics with the screen if it
    /// does not within `timeout`.
    fn wait(&self, what: &str, timeout: Duration, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spindle-tui-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}

/// The front door: `spindle` with no arguments opens the bundled notebook,
/// runs its first cell by itself, and shows a timing and the kernel's code.
#[test]
fn no_arguments_opens_the_bundled_notebook_and_runs_it() {
    if !have_tmux() {
        return;
    }
    let dir = scratch("default");
    let tmux = Tmux::start("default", &dir, &quoted(Path::new(env!("CARGO_BIN_EXE_spindle"))));
    let screen = tmux.wait("the first cell to finish", RUN_TIMEOUT, |s| s.contains("✓ ") || s.contains("✗ "));
    assert!(!screen.contains("✗ "), "the bundled cell failed:\n{screen}");
    assert!(screen.contains(" COMMAND  default notebook"), "{screen}");
    assert!(screen.contains("C[m,n] += A[m,k] * B[k,n]"), "the cell's text is shown:\n{screen}");
    // The summary in the cell's title, e.g. "✓ 3.10 s · best 0.459 ms (c, g=1)".
    assert!(screen.contains(" s · best ") && screen.contains(" ms (c, g="), "{screen}");
    // The runtime tab comes first: the sweep table with the baselines.
    assert!(screen.contains("7 Runtime") && screen.contains("baseline"), "{screen}");
    assert!(
        screen.contains("no GPU") || screen.contains("GPU"),
        "the status line names the backend:\n{screen}"
    );

    tmux.keys(&["3"]);
    tmux.wait("the C source", KEY_TIMEOUT, |s| s.contains("#include <"));
    // Past the kernel IR in the header comment to the loops.
    for _ in 0..20 {
        if tmux.screen().contains("for (") {
            break;
        }
        tmux.keys(&["PageDown"]);
    }
    let screen = tmux.screen();
    assert!(screen.contains("for ("), "C source with its loops:\n{screen}");

    tmux.keys(&["?"]);
    tmux.wait("the help screen", KEY_TIMEOUT, |s| s.contains("Alt+Enter") && s.contains("Ctrl+S"));
    tmux.keys(&["Escape"]);
    tmux.wait("help to close", KEY_TIMEOUT, |s| !s.contains("Esc, q or ? closes"));

    // Nothing was edited: q quits at once and the terminal comes back.
    tmux.keys(&["q"]);
    let screen = tmux.wait("the explorer to exit", KEY_TIMEOUT, |s| s.contains("EXIT="));
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains("output of cell"), "the alternate screen was left:\n{screen}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `spindle FILE.md`: run a cell in place, insert a cell, save with Ctrl+S,
/// and quit (warned once while there are unsaved changes).
#[test]
fn a_notebook_file_runs_edits_and_saves() {
    if !have_tmux() {
        return;
    }
    let dir = scratch("file");
    let path = dir.join("nb.md");
    let cell = "A = gen:powerlaw:rows=300,cols=300,nnz=2000,seed=1\nB = rand A.1x16 seed=2\n\
                format A = groupcoo:dim=0,g=auto\nC[m,n] += A[m,k] * B[k,n]\nsweep g in [1, 4]\n";
    std::fs::write(&path, format!("# Smoke\n\n```spindle\n{cell}```\n")).unwrap();
    let command = format!("{} nb.md", quoted(Path::new(env!("CARGO_BIN_EXE_spindle"))));
    let tmux = Tmux::start("file", &dir, &command);
    tmux.wait("the notebook", KEY_TIMEOUT, |s| s.contains("nb.md") && s.contains("sweep g in [1, 4]"));
    // A FILE is not run by itself; select the code cell and run it in place.
    tmux.keys(&["j", "r"]);
    let screen = tmux.wait("the cell to finish", RUN_TIMEOUT, |s| s.contains("✓ ") || s.contains("✗ "));
    assert!(!screen.contains("✗ "), "the cell failed:\n{screen}");
    assert!(screen.contains("[1] spindle"), "{screen}");
    assert!(screen.contains("★ g="), "the fastest point is marked:\n{screen}");

    // Insert a cell below, type into it, leave edit mode: unsaved.
    tmux.keys(&["b", "Enter", "y", "[", "i", "]", " ", "=", " ", "1", "Escape"]);
    tmux.wait("the dirty flag", KEY_TIMEOUT, |s| s.contains("nb.md [+]"));
    tmux.keys(&["q"]);
    tmux.wait("the unsaved warning", KEY_TIMEOUT, |s| s.contains("unsaved changes"));
    tmux.keys(&["C-s"]);
    tmux.wait("the save", KEY_TIMEOUT, |s| s.contains("saved ") && !s.contains("[+]"));
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(saved, format!("# Smoke\n\n```spindle\n{cell}```\n```spindle\ny[i] = 1\n```\n"));

    tmux.keys(&["q"]);
    let screen = tmux.wait("the explorer to exit", KEY_TIMEOUT, |s| s.contains("EXIT="));
    assert!(screen.contains("EXIT=0"), "{screen}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Without a terminal the explorer says what to run instead.
#[test]
fn without_a_terminal_it_runs_the_notebook_headless() {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{text}");
    assert!(err.contains("running the notebook headless"), "{err}");
    // The bundled notebook's first cell: the GroupCOO sweep over g, checked.
    assert!(text.contains("(bundled notebook) cell 1"), "{text}");
    assert!(text.contains("median ms") && text.contains("max error"), "{text}");
    // A mistyped subcommand is not taken for a new notebook.
    let out = Command::new(env!("CARGO_BIN_EXE_spindle")).arg("stat").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no notebook or command `stat`"), "{err}");
}
