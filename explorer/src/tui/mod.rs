//! The notebook explorer: a terminal UI over the notebook engine.
//!
//! `app` holds the state and the key map (pure, tested without a
//! terminal), `ui` draws it, `worker` runs cells on a background thread,
//! `highlight` colours C and CUDA, `help` is the key table. This module
//! owns the terminal: raw mode, the alternate screen, the keyboard
//! enhancement flags, and putting all of it back on exit and on panic.

pub mod app;
pub mod help;
pub mod highlight;
pub mod ui;
pub mod worker;

#[cfg(test)]
mod snapshots;

use std::io::{IsTerminal, Stdout, stdout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
    supports_keyboard_enhancement,
};

use crate::notebook::engine::{self, RunOptions};
use crate::notebook::markdown::{self, Cell};
use crate::notebook::output::{CellOutput, Progress};
use app::{App, Level};
use worker::Runner;

/// Runs cells with the notebook engine.
struct EngineRunner {
    options: RunOptions,
}

impl Runner for EngineRunner {
    fn run(&self, source: &str, progress: &mut dyn FnMut(Progress), cancel: &AtomicBool) -> CellOutput {
        engine::run_cell(source, &self.options, progress, cancel)
    }
}

/// With no terminal (a pipe, CI, a script) the explorer cannot draw: run
/// the notebook headless instead, as `spindle notebook run` does (the
/// same checks of the file, the same messages and exit codes), so the main
/// job still shows its results.
fn without_a_terminal(path: Option<&std::path::Path>) -> ExitCode {
    let notebook = match path {
        Some(path) => match crate::notebook::headless::read(path) {
            Ok(notebook) => notebook,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        },
        None => markdown::default_notebook(),
    };
    eprintln!(
        "spindle: no terminal for the explorer: running the notebook headless \
         (`spindle notebook run FILE --export DIR` also writes plots and code)"
    );
    let shown = path.map_or_else(|| std::path::PathBuf::from("(bundled notebook)"), |p| p.to_path_buf());
    let base_dir = path.and_then(|p| p.parent()).map(|d| d.to_path_buf());
    let options = RunOptions { base_dir, ..RunOptions::default() };
    match crate::notebook::headless::run_notebook(&shown, &notebook, &options, None) {
        Ok(report) if report.failed == 0 => ExitCode::SUCCESS,
        Ok(report) => {
            eprintln!("error: {} of {} cells failed", report.failed, report.cells);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `spindle [FILE]`: opens FILE, or the bundled notebook, in the explorer.
pub fn main(file: Option<PathBuf>) -> ExitCode {
    let terminal = stdout().is_terminal() && std::io::stdin().is_terminal();
    // A mistyped subcommand lands here too: only a `.md` name makes a new notebook.
    let new_notebook = |path: &std::path::Path| path.extension().is_some_and(|e| e == "md");
    let (cells, path, autorun, greeting) = match file {
        Some(path) if !path.exists() && !new_notebook(&path) => {
            eprintln!(
                "error: no notebook or command `{}` (notebooks end in .md; `spindle --help` lists the commands)",
                path.display()
            );
            return ExitCode::from(2);
        }
        // Headless, a missing file is an error (there is no editor to
        // create it), as in `spindle notebook run`.
        _ if !terminal => return without_a_terminal(file.as_deref()),
        Some(path) if path.exists() => match markdown::load(&path) {
            Ok(nb) => (nb.cells, Some(path), false, None),
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        },
        // A new file, as editors do: Ctrl+S creates it.
        Some(path) => {
            let note = format!("new notebook: Ctrl+S writes {}", path.display());
            (vec![Cell::spindle("")], Some(path), false, Some(note))
        }
        None => (markdown::default_notebook().cells, None, true, None),
    };
    // Relative data paths in a notebook's cells are found beside it.
    let base_dir = path
        .as_ref()
        .and_then(|p| p.parent())
        .map(|d| if d.as_os_str().is_empty() { ".".into() } else { d.to_path_buf() });
    let runner = EngineRunner { options: RunOptions { base_dir, ..RunOptions::default() } };
    let mut app = App::new(cells, path, Arc::new(runner));
    if autorun {
        app.run_first_code_cell();
    }
    if let Some(text) = greeting {
        app.message = Some(app::Message { text, level: Level::Info });
    }
    match run(&mut app) {
        Ok(()) => {
            report_background_panic();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: the terminal failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the keyboard enhancement flags were pushed (and must be popped).
static ENHANCED: AtomicBool = AtomicBool::new(false);
/// The thread that owns the terminal; a panic there restores it.
static UI_THREAD: OnceLock<ThreadId> = OnceLock::new();
/// A panic on another thread, which cannot be printed over the screen;
/// printed once the terminal is back.
static BACKGROUND_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn run(app: &mut App) -> std::io::Result<()> {
    let _ = UI_THREAD.set(std::thread::current().id());
    install_panic_hook();
    let mut terminal = setup()?;
    let result = event_loop(&mut terminal, app);
    restore();
    result
}

fn setup() -> std::io::Result<Terminal<CrosstermBackend<Stdout>>> {
    enable_raw_mode()?;
    let mut out = stdout();
    execute!(out, EnterAlternateScreen, EnableBracketedPaste)?;
    // Shift+Enter and Ctrl+Enter are only told apart from Enter under the
    // keyboard enhancement protocol (kitty, foot, WezTerm, recent xterm...);
    // elsewhere the fallbacks in `?` do the same.
    if matches!(supports_keyboard_enhancement(), Ok(true))
        && execute!(out, PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES))
            .is_ok()
    {
        ENHANCED.store(true, Ordering::SeqCst);
    }
    let mut terminal = Terminal::new(CrosstermBackend::new(out))?;
    terminal.clear()?;
    Ok(terminal)
}

/// Leaves raw mode and the alternate screen; safe to call twice.
fn restore() {
    let mut out = stdout();
    if ENHANCED.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, PopKeyboardEnhancementFlags);
    }
    let _ = execute!(out, DisableBracketedPaste, LeaveAlternateScreen, ratatui::crossterm::cursor::Show);
    let _ = disable_raw_mode();
}

fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if UI_THREAD.get() == Some(&std::thread::current().id()) {
            restore();
            previous(info);
        } else {
            // A cell's thread (its panic becomes the cell's error) or a
            // thread of the engine: the screen stays up.
            if let Ok(mut slot) = BACKGROUND_PANIC.lock() {
                slot.get_or_insert_with(|| info.to_string());
            }
        }
    }));
}

fn report_background_panic() {
    if let Some(message) = BACKGROUND_PANIC.lock().ok().and_then(|mut s| s.take()) {
        eprintln!("note: a background thread panicked during the session: {message}");
    }
}

fn event_loop(terminal: &mut Terminal<CrosstermBackend<Stdout>>, app: &mut App) -> std::io::Result<()> {
    loop {
        app.tick();
        terminal.draw(|frame| ui::draw(frame, app))?;
        if app.should_quit {
            return Ok(());
        }
        // Poll with a timeout so progress and the spinner redraw while a
        // cell runs, and a finished run shows without a key press.
        let wait = if app.is_busy() { Duration::from_millis(80) } else { Duration::from_millis(200) };
        if !event::poll(wait)? {
            continue;
        }
        // Take every event that queued up before drawing again, so fast
        // typing and key repeat do not lag behind.
        loop {
            match event::read()? {
                Event::Key(key) => app.on_key(key),
                Event::Paste(text) => app.on_paste(&text),
                _ => {}
            }
            if app.should_quit || !event::poll(Duration::ZERO)? {
                break;
            }
        }
    }
}
