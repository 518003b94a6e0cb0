//! The explorer's state and what each key does to it. Nothing here touches
//! the terminal: tests drive `on_key` and read the state back, and
//! `ui::draw` renders it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui_textarea::{CursorMove, TextArea};

use super::worker::{Msg, Runner, Worker};
use crate::notebook::markdown::{self, Cell as DocCell, CellKind as Kind, Notebook};
use crate::notebook::output::{CellOutput, Progress};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Command,
    Edit,
}

/// The output tabs, in the order Tab cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Einsum,
    Ir,
    C,
    Cuda,
    Format,
    Resources,
    Runtime,
}

impl Tab {
    pub const ALL: [Tab; 7] =
        [Tab::Einsum, Tab::Ir, Tab::C, Tab::Cuda, Tab::Format, Tab::Resources, Tab::Runtime];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Einsum => "Einsum",
            Tab::Ir => "Kernel IR",
            Tab::C => "C",
            Tab::Cuda => "CUDA",
            Tab::Format => "Format",
            Tab::Resources => "Resources",
            Tab::Runtime => "Runtime",
        }
    }

    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|&t| t == self).unwrap_or(0)
    }

    fn shifted(self, by: isize) -> Tab {
        let n = Tab::ALL.len() as isize;
        Tab::ALL[(self.index() as isize + by).rem_euclid(n) as usize]
    }
}

/// One cell as the explorer holds it.
#[derive(Debug)]
pub struct UiCell {
    /// Stable across inserts and deletes, so a run's result finds its cell.
    pub id: u64,
    pub kind: Kind,
    pub source: String,
    pub output: Option<CellOutput>,
    /// Jupyter's execution count: which run of this session produced the output.
    pub count: Option<u32>,
    /// The source changed since the output was produced.
    pub stale: bool,
}

/// The cell being run now.
#[derive(Debug)]
pub struct Running {
    pub id: u64,
    /// The source as it was sent, to tell whether the output is stale.
    pub source: String,
    pub progress: Progress,
    pub started: Instant,
    pub cancelling: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// A one-line message for the status bar; the next key clears it.
#[derive(Clone, Debug)]
pub struct Message {
    pub text: String,
    pub level: Level,
}

/// The explorer.
#[derive(Debug)]
pub struct App {
    pub cells: Vec<UiCell>,
    pub selected: usize,
    pub mode: Mode,
    /// The editor of the selected cell, in edit mode only.
    pub editor: Option<TextArea<'static>>,
    pub tab: Tab,
    /// Lines scrolled in the output pane (clamped when drawn).
    pub scroll: u16,
    /// Columns scrolled in the text tabs, for long source lines.
    pub hscroll: u16,
    /// Rows of the output body at the last draw, for PgUp / PgDn.
    pub page: u16,
    /// Where Ctrl+S writes; None for the bundled notebook until first saved.
    pub path: Option<PathBuf>,
    pub dirty: bool,
    /// Some(scroll) while the help screen is open.
    pub help: Option<u16>,
    /// The output pane fills the screen.
    pub zoom: bool,
    pub message: Option<Message>,
    pub running: Option<Running>,
    /// Notes of the last finished run ("C backend only: no GPU", ...).
    pub notes: Vec<String>,
    pub should_quit: bool,
    /// The first cell drawn in the cell list (kept by `ui` so the selected
    /// cell stays visible).
    pub list_offset: usize,
    queue: VecDeque<u64>,
    quit_armed: bool,
    pending_d: bool,
    deleted: Option<(usize, UiCell)>,
    next_id: u64,
    runs: u32,
    worker: Worker,
}

/// What a run key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunKey {
    /// Shift+Enter: run, then select the next cell.
    Advance,
    /// Ctrl+Enter: run and stay.
    InPlace,
}

/// The run keys of both modes, with the fallbacks for terminals that send
/// Shift+Enter and Ctrl+Enter as a plain Enter.
fn run_key(key: &KeyEvent, mode: Mode) -> Option<RunKey> {
    let m = key.modifiers;
    match key.code {
        KeyCode::Enter if m.contains(KeyModifiers::SHIFT) || m.contains(KeyModifiers::ALT) => {
            Some(RunKey::Advance)
        }
        KeyCode::Enter if m.contains(KeyModifiers::CONTROL) => Some(RunKey::InPlace),
        KeyCode::Char('j') if m.contains(KeyModifiers::CONTROL) => Some(RunKey::Advance),
        KeyCode::Char('r') if m.contains(KeyModifiers::CONTROL) => Some(RunKey::InPlace),
        KeyCode::Char('r') if mode == Mode::Command && m.difference(KeyModifiers::SHIFT).is_empty() => {
            Some(RunKey::InPlace)
        }
        _ => None,
    }
}

impl App {
    pub fn new(cells: Vec<DocCell>, path: Option<PathBuf>, runner: Arc<dyn Runner>) -> Self {
        let mut app = App {
            cells: Vec::new(),
            selected: 0,
            mode: Mode::Command,
            editor: None,
            tab: Tab::Runtime,
            scroll: 0,
            hscroll: 0,
            page: 10,
            path,
            dirty: false,
            help: None,
            zoom: false,
            message: None,
            running: None,
            notes: Vec::new(),
            should_quit: false,
            list_offset: 0,
            queue: VecDeque::new(),
            quit_armed: false,
            pending_d: false,
            deleted: None,
            next_id: 0,
            runs: 0,
            worker: Worker::new(runner),
        };
        for c in cells {
            let cell = app.new_cell(c.kind, c.source);
            app.cells.push(cell);
        }
        if app.cells.is_empty() {
            let cell = app.new_cell(Kind::Spindle, String::new());
            app.cells.push(cell);
        }
        app
    }

    fn new_cell(&mut self, kind: Kind, source: String) -> UiCell {
        self.next_id += 1;
        UiCell { id: self.next_id, kind, source, output: None, count: None, stale: false }
    }

    /// The file name for the status bar.
    pub fn title(&self) -> String {
        match &self.path {
            Some(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            None => "default notebook".into(),
        }
    }

    /// Selects the first code cell and runs it: the bundled notebook shows
    /// results as soon as it opens.
    pub fn run_first_code_cell(&mut self) {
        if let Some(i) = self.cells.iter().position(|c| c.kind == Kind::Spindle) {
            self.selected = i;
            self.enqueue(self.cells[i].id);
        }
    }

    /// Unsaved changes, counting text typed into the open editor.
    pub fn is_dirty(&self) -> bool {
        self.dirty
            || self.editor.as_ref().is_some_and(|e| {
                let cell = &self.cells[self.selected];
                editor_text(e, &cell.source) != cell.source
            })
    }

    /// Whether a cell runs or waits to.
    pub fn is_busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// Whether the cell runs now or waits in the queue.
    pub fn is_pending(&self, id: u64) -> bool {
        self.running.as_ref().is_some_and(|r| r.id == id) || self.queue.contains(&id)
    }

    /// The cells as the notebook file holds them (the editor's text included).
    pub fn doc_cells(&self) -> Vec<DocCell> {
        self.cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let source = match (&self.editor, i == self.selected) {
                    (Some(editor), true) => editor_text(editor, &c.source),
                    _ => c.source.clone(),
                };
                DocCell { kind: c.kind, source }
            })
            .collect()
    }

    fn say(&mut self, level: Level, text: impl Into<String>) {
        self.message = Some(Message { text: text.into(), level });
    }

    // ---- background work ----

    /// Takes what the worker reported and starts the next queued cell.
    /// Returns whether anything changed.
    pub fn tick(&mut self) -> bool {
        let mut changed = false;
        while let Some(msg) = self.worker.try_recv() {
            self.on_msg(msg);
            changed = true;
        }
        changed | self.start_next()
    }

    /// Blocks until every queued cell has finished (tests only).
    #[cfg(test)]
    pub fn wait_idle(&mut self, timeout: std::time::Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.is_busy() {
            self.start_next();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Some(msg) = self.worker.recv_timeout(left) {
                self.on_msg(msg);
            }
        }
        true
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Progress(id, p) => {
                if let Some(r) = self.running.as_mut().filter(|r| r.id == id) {
                    r.progress = p;
                }
            }
            Msg::Done(id, output) => {
                self.worker.finished();
                let source = match self.running.take() {
                    Some(r) if r.id == id => r.source,
                    other => {
                        self.running = other;
                        String::new()
                    }
                };
                self.runs += 1;
                let count = self.runs;
                let Some(index) = self.cells.iter().position(|c| c.id == id) else {
                    // Deleted while it ran.
                    return;
                };
                if let Some(error) = &output.error {
                    let first = error.lines().next().unwrap_or("").to_string();
                    self.say(Level::Error, format!("cell {} failed: {first}", index + 1));
                } else if output.cancelled {
                    self.say(Level::Warn, format!("cell {} cancelled; what finished is shown", index + 1));
                } else {
                    self.say(Level::Info, format!("cell {} ran in {:.2} s", index + 1, output.seconds));
                }
                self.notes = output.notes.clone();
                let cell = &mut self.cells[index];
                cell.stale = cell.source != source;
                cell.output = Some(*output);
                cell.count = Some(count);
            }
        }
    }

    fn start_next(&mut self) -> bool {
        if self.running.is_some() {
            return false;
        }
        while let Some(id) = self.queue.pop_front() {
            if let Some(cell) = self.cells.iter().find(|c| c.id == id) {
                let source = cell.source.clone();
                self.worker.start(id, source.clone());
                self.running = Some(Running {
                    id,
                    source,
                    progress: Progress::default(),
                    started: Instant::now(),
                    cancelling: false,
                });
                return true;
            }
        }
        false
    }

    fn enqueue(&mut self, id: u64) {
        if self.is_pending(id) {
            self.say(Level::Warn, "that cell is already running or queued");
            return;
        }
        self.queue.push_back(id);
        if self.running.is_some() {
            self.say(Level::Info, "queued: it runs when the running cell finishes (Esc cancels)");
        }
        self.start_next();
    }

    fn cancel(&mut self) {
        if let Some(r) = &mut self.running {
            self.worker.cancel();
            r.cancelling = true;
            self.queue.clear();
            self.say(Level::Warn, "cancelling…");
        }
    }

    // ---- keys ----

    pub fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('s') {
            self.sync_editor();
            self.save();
            return;
        }
        if self.help.is_some() {
            self.help_key(key);
            return;
        }
        match self.mode {
            Mode::Edit => self.edit_key(key),
            Mode::Command => self.command_key(key),
        }
    }

    /// Bracketed paste: text goes into the editor as typed.
    pub fn on_paste(&mut self, text: &str) {
        if let Some(editor) = &mut self.editor {
            editor.insert_str(text.replace("\r\n", "\n").replace('\r', "\n"));
        }
    }

    fn help_key(&mut self, key: KeyEvent) {
        let scroll = self.help.unwrap_or(0);
        self.help = match key.code {
            KeyCode::Esc | KeyCode::Char('q' | '?') | KeyCode::F(1) => None,
            KeyCode::Char('j') | KeyCode::Down => Some(scroll.saturating_add(1)),
            KeyCode::Char('k') | KeyCode::Up => Some(scroll.saturating_sub(1)),
            KeyCode::PageDown => Some(scroll.saturating_add(10)),
            KeyCode::PageUp => Some(scroll.saturating_sub(10)),
            _ => Some(scroll),
        };
    }

    fn edit_key(&mut self, key: KeyEvent) {
        if let Some(run) = run_key(&key, Mode::Edit) {
            self.run_selected(run);
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let Some(editor) = &mut self.editor else {
            self.mode = Mode::Command;
            return;
        };
        match key.code {
            KeyCode::Esc => self.leave_edit(),
            KeyCode::Char('z') if ctrl => {
                editor.undo();
            }
            KeyCode::Char('y') if ctrl => {
                editor.redo();
            }
            _ => {
                editor.input(key);
            }
        }
    }

    fn command_key(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let is_char = |c: char| key.code == KeyCode::Char(c) && !ctrl && !alt;
        // A message stays until the next key; "dd" and "q q" are two-key
        // sequences that any other key breaks.
        self.message = None;
        let pending_d = std::mem::take(&mut self.pending_d);
        if !is_char('q') {
            self.quit_armed = false;
        }
        if let Some(run) = run_key(&key, Mode::Command) {
            self.run_selected(run);
            return;
        }
        let page = self.page.max(1);
        match key.code {
            KeyCode::Char('c') if ctrl => {
                if self.running.is_some() {
                    self.cancel();
                } else {
                    self.say(Level::Info, "q quits");
                }
            }
            KeyCode::Char('d') if ctrl => self.scroll = self.scroll.saturating_add(page / 2),
            KeyCode::Char('u') if ctrl => self.scroll = self.scroll.saturating_sub(page / 2),
            _ if ctrl || alt => {}
            KeyCode::Esc => self.cancel(),
            KeyCode::Enter => self.enter_edit(),
            KeyCode::F(1) | KeyCode::Char('?') => self.help = Some(0),
            KeyCode::Char('q') => self.quit(),
            KeyCode::Char('j') | KeyCode::Down => self.select(self.selected + 1),
            KeyCode::Char('k') | KeyCode::Up => self.select(self.selected.saturating_sub(1)),
            KeyCode::Char('g') | KeyCode::Home => self.select(0),
            KeyCode::Char('G') | KeyCode::End => self.select(self.cells.len().saturating_sub(1)),
            KeyCode::Char('a') => self.insert(self.selected),
            KeyCode::Char('b') => self.insert(self.selected + 1),
            KeyCode::Char('d') if pending_d => self.delete(),
            KeyCode::Char('d') => {
                self.pending_d = true;
                self.say(Level::Info, "d: press d again to delete the cell");
            }
            KeyCode::Char('u') => self.undo_delete(),
            KeyCode::Char('m') => self.set_kind(Kind::Markdown),
            KeyCode::Char('y') => self.set_kind(Kind::Spindle),
            KeyCode::Char('R') => self.run_all(),
            KeyCode::Tab => self.set_tab(self.tab.shifted(1)),
            KeyCode::BackTab => self.set_tab(self.tab.shifted(-1)),
            KeyCode::Char(c @ '1'..='7') => self.set_tab(Tab::ALL[c as usize - '1' as usize]),
            KeyCode::Char('J') => self.scroll = self.scroll.saturating_add(3),
            KeyCode::Char('K') => self.scroll = self.scroll.saturating_sub(3),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_add(page),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(page),
            KeyCode::Char('l') | KeyCode::Right => self.hscroll = self.hscroll.saturating_add(8),
            KeyCode::Char('h') | KeyCode::Left => self.hscroll = self.hscroll.saturating_sub(8),
            KeyCode::Char('o') => self.zoom = !self.zoom,
            _ => {}
        }
    }

    fn quit(&mut self) {
        if self.is_dirty() && !self.quit_armed {
            self.quit_armed = true;
            self.say(Level::Warn, "unsaved changes: Ctrl+S saves, q again quits without saving");
            return;
        }
        self.cancel();
        self.should_quit = true;
    }

    fn set_tab(&mut self, tab: Tab) {
        self.tab = tab;
        self.scroll = 0;
        self.hscroll = 0;
    }

    fn select(&mut self, index: usize) {
        let index = index.min(self.cells.len().saturating_sub(1));
        if index != self.selected {
            self.selected = index;
            self.scroll = 0;
            self.hscroll = 0;
        }
    }

    fn enter_edit(&mut self) {
        let lines: Vec<String> = self.cells[self.selected].source.lines().map(str::to_string).collect();
        let mut editor = TextArea::new(lines);
        editor.move_cursor(CursorMove::Bottom);
        editor.move_cursor(CursorMove::End);
        self.editor = Some(editor);
        self.mode = Mode::Edit;
    }

    /// Copies the editor's text into the cell (the editor stays open).
    fn sync_editor(&mut self) {
        if let Some(editor) = &self.editor {
            let cell = &mut self.cells[self.selected];
            let text = editor_text(editor, &cell.source);
            if cell.source != text {
                cell.source = text;
                cell.stale = cell.output.is_some();
                self.dirty = true;
            }
        }
    }

    fn leave_edit(&mut self) {
        self.sync_editor();
        self.editor = None;
        self.mode = Mode::Command;
    }

    fn run_selected(&mut self, run: RunKey) {
        self.leave_edit();
        let cell = &self.cells[self.selected];
        if cell.kind == Kind::Spindle && !cell.source.trim().is_empty() {
            self.enqueue(cell.id);
        }
        if run == RunKey::Advance {
            // As in Jupyter, running the last cell adds an empty one to type into.
            if self.selected + 1 == self.cells.len() {
                let cell = self.new_cell(Kind::Spindle, String::new());
                self.cells.push(cell);
                self.dirty = true;
            }
            self.select(self.selected + 1);
        }
    }

    fn run_all(&mut self) {
        let ids: Vec<u64> = self
            .cells
            .iter()
            .filter(|c| c.kind == Kind::Spindle && !c.source.trim().is_empty() && !self.is_pending(c.id))
            .map(|c| c.id)
            .collect();
        for id in ids {
            self.enqueue(id);
        }
    }

    fn insert(&mut self, at: usize) {
        let cell = self.new_cell(Kind::Spindle, String::new());
        let at = at.min(self.cells.len());
        self.cells.insert(at, cell);
        self.selected = at;
        self.scroll = 0;
        self.dirty = true;
    }

    fn delete(&mut self) {
        let cell = self.cells.remove(self.selected);
        if self.running.as_ref().is_some_and(|r| r.id == cell.id) {
            self.worker.cancel();
            if let Some(r) = &mut self.running {
                r.cancelling = true;
            }
        }
        self.queue.retain(|&id| id != cell.id);
        self.deleted = Some((self.selected, cell));
        if self.cells.is_empty() {
            let empty = self.new_cell(Kind::Spindle, String::new());
            self.cells.push(empty);
        }
        self.selected = self.selected.min(self.cells.len() - 1);
        self.scroll = 0;
        self.dirty = true;
        self.say(Level::Info, "cell deleted (u undoes)");
    }

    fn undo_delete(&mut self) {
        if let Some((at, cell)) = self.deleted.take() {
            let at = at.min(self.cells.len());
            self.cells.insert(at, cell);
            self.selected = at;
            self.scroll = 0;
            self.dirty = true;
        } else {
            self.say(Level::Info, "nothing to undo");
        }
    }

    fn set_kind(&mut self, kind: Kind) {
        let cell = &mut self.cells[self.selected];
        if cell.kind != kind {
            cell.kind = kind;
            self.dirty = true;
        }
    }

    /// Writes the notebook; the bundled one goes to a new file in the
    /// current folder, never over an existing one.
    pub fn save(&mut self) {
        let path = self.path.clone().unwrap_or_else(|| free_path(Path::new(".")));
        match markdown::save(&path, &Notebook::from(self.doc_cells())) {
            Ok(()) => {
                self.say(Level::Info, format!("saved {}", path.display()));
                self.path = Some(path);
                self.dirty = false;
                self.quit_armed = false;
            }
            Err(e) => self.say(Level::Error, format!("not saved: {e:#}")),
        }
    }
}

/// The editor's text. The lines of a cell end with a newline in the file;
/// the editor has no final empty line, so the newline is put back, and an
/// unedited cell compares equal to what was loaded.
fn editor_text(editor: &TextArea<'_>, old: &str) -> String {
    let mut text = editor.lines().join("\n");
    if old.ends_with('\n') && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// `spindle-notebook.md`, or `spindle-notebook-N.md` for the first N free.
fn free_path(dir: &Path) -> PathBuf {
    let mut candidate = dir.join("spindle-notebook.md");
    let mut n = 2;
    while candidate.exists() {
        candidate = dir.join(format!("spindle-notebook-{n}.md"));
        n += 1;
    }
    candidate
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// Answers every run with a copy of one output, echoing the source into
    /// `rewritten`, after reporting progress twice.
    pub(crate) struct Fake(pub CellOutput);

    impl Runner for Fake {
        fn run(&self, source: &str, progress: &mut dyn FnMut(Progress), _: &AtomicBool) -> CellOutput {
            progress(Progress { done: 1, total: 2, message: "compiling".into() });
            progress(Progress { done: 2, total: 2, message: "running".into() });
            CellOutput { rewritten: vec![source.to_string()], ..self.0.clone() }
        }
    }

    /// Blocks until released or cancelled, so tests can act mid-run.
    struct Gate(Mutex<mpsc::Receiver<()>>);

    impl Runner for Gate {
        fn run(&self, _: &str, progress: &mut dyn FnMut(Progress), cancel: &AtomicBool) -> CellOutput {
            progress(Progress { done: 0, total: 4, message: "g=1: compiling C".into() });
            let rx = self.0.lock().unwrap();
            loop {
                if cancel.load(Ordering::Relaxed) {
                    return CellOutput { cancelled: true, ..CellOutput::default() };
                }
                if rx.recv_timeout(Duration::from_millis(5)).is_ok() {
                    return CellOutput { seconds: 1.0, ..CellOutput::default() };
                }
            }
        }
    }

    struct Panics;

    impl Runner for Panics {
        fn run(&self, _: &str, _: &mut dyn FnMut(Progress), _: &AtomicBool) -> CellOutput {
            panic!("boom");
        }
    }

    pub(crate) fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    pub(crate) fn keys(app: &mut App, text: &str) {
        for c in text.chars() {
            app.on_key(key(KeyCode::Char(c)));
        }
    }

    fn with(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    fn app(cells: &[&str]) -> App {
        let cells = cells.iter().map(|s| DocCell::spindle(*s)).collect();
        App::new(cells, None, Arc::new(Fake(CellOutput { seconds: 0.5, ..CellOutput::default() })))
    }

    fn sources(app: &App) -> Vec<&str> {
        app.cells.iter().map(|c| c.source.as_str()).collect()
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn navigation_insert_delete_undo() {
        let mut a = app(&["one", "two", "three"]);
        keys(&mut a, "jj");
        assert_eq!(a.selected, 2);
        keys(&mut a, "j");
        assert_eq!(a.selected, 2, "j stops at the last cell");
        keys(&mut a, "kkk");
        assert_eq!(a.selected, 0);
        keys(&mut a, "b");
        assert_eq!((sources(&a), a.selected), (vec!["one", "", "two", "three"], 1));
        keys(&mut a, "a");
        assert_eq!((sources(&a), a.selected), (vec!["one", "", "", "two", "three"], 1));
        assert!(a.dirty);
        keys(&mut a, "ddjdd");
        assert_eq!(sources(&a), ["one", "", "three"]);
        assert_eq!(a.selected, 2);
        keys(&mut a, "u");
        assert_eq!(sources(&a), ["one", "", "two", "three"]);
        assert_eq!(a.selected, 2);
        // "d" then another key deletes nothing.
        keys(&mut a, "dkd");
        assert_eq!(a.cells.len(), 4);
        assert_eq!(a.selected, 1);
        keys(&mut a, "G");
        assert_eq!(a.selected, 3);
        keys(&mut a, "g");
        assert_eq!(a.selected, 0);
        keys(&mut a, "m");
        assert_eq!(a.cells[0].kind, Kind::Markdown);
        keys(&mut a, "y");
        assert_eq!(a.cells[0].kind, Kind::Spindle);
    }

    #[test]
    fn deleting_the_only_cell_leaves_an_empty_one() {
        let mut a = app(&["only"]);
        keys(&mut a, "dd");
        assert_eq!(sources(&a), [""]);
        assert_eq!(a.selected, 0);
    }

    #[test]
    fn edit_mode_types_and_esc_keeps_the_text() {
        let mut a = app(&["x"]);
        a.on_key(key(KeyCode::Enter));
        assert_eq!(a.mode, Mode::Edit);
        // In edit mode letters are text, not commands.
        keys(&mut a, "yz dd");
        a.on_key(key(KeyCode::Enter));
        keys(&mut a, "q");
        a.on_key(key(KeyCode::Esc));
        assert_eq!(a.mode, Mode::Command);
        assert_eq!(sources(&a), ["xyz dd\nq"]);
        assert!(a.dirty && !a.should_quit);
        // Opening and leaving the editor changes nothing, trailing newline included.
        let mut b = app(&["x\n"]);
        b.on_key(key(KeyCode::Enter));
        b.on_key(key(KeyCode::Esc));
        assert_eq!((sources(&b), b.dirty), (vec!["x\n"], false));
        // Ctrl+Z undoes in the editor.
        a.on_key(key(KeyCode::Enter));
        keys(&mut a, "!");
        a.on_key(with(KeyCode::Char('z'), KeyModifiers::CONTROL));
        a.on_key(key(KeyCode::Esc));
        assert_eq!(sources(&a), ["xyz dd\nq"]);
    }

    #[test]
    fn shift_enter_runs_and_moves_on_adding_a_cell_at_the_end() {
        let mut a = app(&["first", "second"]);
        a.on_key(with(KeyCode::Enter, KeyModifiers::SHIFT));
        assert_eq!(a.selected, 1);
        assert!(a.wait_idle(WAIT));
        let out = a.cells[0].output.as_ref().unwrap();
        assert_eq!(out.rewritten, ["first"]);
        assert_eq!(a.cells[0].count, Some(1));
        // Alt+Enter on the last cell: runs it and adds an empty cell below.
        a.on_key(with(KeyCode::Enter, KeyModifiers::ALT));
        assert_eq!(a.cells.len(), 3);
        assert_eq!(a.selected, 2);
        assert!(a.wait_idle(WAIT));
        assert_eq!(a.cells[1].count, Some(2));
        assert_eq!(a.message.as_ref().unwrap().text, "cell 2 ran in 0.50 s");
        // Ctrl+J is the fallback that every terminal sends.
        keys(&mut a, "k");
        a.on_key(with(KeyCode::Char('j'), KeyModifiers::CONTROL));
        assert!(a.wait_idle(WAIT));
        assert_eq!(a.cells[1].count, Some(3));
        assert_eq!(a.selected, 2);
    }

    #[test]
    fn run_in_place_from_both_modes() {
        let mut a = app(&["first", "second"]);
        for k in [
            key(KeyCode::Char('r')),
            with(KeyCode::Char('r'), KeyModifiers::CONTROL),
            with(KeyCode::Enter, KeyModifiers::CONTROL),
        ] {
            a.on_key(k);
            assert!(a.wait_idle(WAIT));
            assert_eq!(a.selected, 0);
        }
        assert_eq!(a.cells[0].count, Some(3));
        // From edit mode the edited text is what runs.
        a.on_key(key(KeyCode::Enter));
        keys(&mut a, "2");
        a.on_key(with(KeyCode::Enter, KeyModifiers::CONTROL));
        assert_eq!(a.mode, Mode::Command);
        assert!(a.wait_idle(WAIT));
        assert_eq!(a.cells[0].output.as_ref().unwrap().rewritten, ["first2"]);
        assert!(!a.cells[0].stale);
        // Markdown and empty cells do not run.
        keys(&mut a, "mr");
        assert!(!a.is_busy());
    }

    #[test]
    fn esc_cancels_the_running_cell_and_the_queue() {
        let (tx, rx) = mpsc::channel();
        let cells = vec![DocCell::spindle("a"), DocCell::spindle("b")];
        let mut a = App::new(cells, None, Arc::new(Gate(Mutex::new(rx))));
        keys(&mut a, "rjr");
        assert!(a.running.is_some());
        assert_eq!(
            a.message.as_ref().unwrap().text,
            "queued: it runs when the running cell finishes (Esc cancels)"
        );
        assert!(a.is_pending(a.cells[1].id));
        a.on_key(key(KeyCode::Esc));
        assert!(a.running.as_ref().unwrap().cancelling);
        assert!(a.wait_idle(WAIT));
        assert!(a.cells[0].output.as_ref().unwrap().cancelled);
        assert!(a.cells[1].output.is_none(), "the queued cell was dropped");
        assert_eq!(a.message.as_ref().unwrap().level, Level::Warn);
        // A finished run reports its output.
        keys(&mut a, "r");
        tx.send(()).unwrap();
        assert!(a.wait_idle(WAIT));
        assert_eq!(a.cells[1].output.as_ref().unwrap().seconds, 1.0);
    }

    #[test]
    fn progress_reaches_the_running_cell() {
        let (tx, rx) = mpsc::channel();
        let mut a = App::new(vec![DocCell::spindle("a")], None, Arc::new(Gate(Mutex::new(rx))));
        keys(&mut a, "r");
        let deadline = Instant::now() + WAIT;
        while a.running.as_ref().unwrap().progress.total == 0 && Instant::now() < deadline {
            a.tick();
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(a.running.as_ref().unwrap().progress.message, "g=1: compiling C");
        tx.send(()).unwrap();
        assert!(a.wait_idle(WAIT));
    }

    #[test]
    fn a_panicking_engine_becomes_a_cell_error() {
        let mut a = App::new(vec![DocCell::spindle("a")], None, Arc::new(Panics));
        keys(&mut a, "r");
        assert!(a.wait_idle(WAIT));
        let error = a.cells[0].output.as_ref().unwrap().error.clone().unwrap();
        assert_eq!(error, "internal error: the engine panicked: boom");
        assert_eq!(a.message.as_ref().unwrap().level, Level::Error);
    }

    #[test]
    fn quit_warns_once_when_unsaved() {
        let mut a = app(&["x"]);
        keys(&mut a, "q");
        assert!(a.should_quit, "nothing to save: q quits at once");
        let mut a = app(&["x"]);
        keys(&mut a, "b");
        keys(&mut a, "q");
        assert!(!a.should_quit);
        assert!(a.message.as_ref().unwrap().text.starts_with("unsaved changes"));
        keys(&mut a, "q");
        assert!(a.should_quit);
        // Another key between the two disarms the warning.
        let mut a = app(&["x"]);
        keys(&mut a, "bqjq");
        assert!(!a.should_quit);
    }

    #[test]
    fn save_writes_markdown_and_clears_dirty() {
        let dir = std::env::temp_dir().join(format!("spindle-tui-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nb.md");
        let cells = vec![DocCell::markdown("# Title"), DocCell::spindle("A = load cora")];
        let mut a = App::new(cells, Some(path.clone()), Arc::new(Fake(CellOutput::default())));
        keys(&mut a, "j");
        a.on_key(key(KeyCode::Enter));
        keys(&mut a, "!");
        // Ctrl+S in edit mode saves the text being typed.
        a.on_key(with(KeyCode::Char('s'), KeyModifiers::CONTROL));
        assert!(!a.dirty);
        assert_eq!(a.mode, Mode::Edit);
        let loaded = markdown::load(&path).unwrap().cells;
        assert_eq!(loaded, [DocCell::markdown("# Title\n"), DocCell::spindle("A = load cora!\n")]);
        keys(&mut a, "?");
        assert_eq!(a.help, None, "? is text in edit mode");
        std::fs::remove_dir_all(&dir).unwrap();
        // A free name for the bundled notebook never overwrites a file.
        let dir = std::env::temp_dir().join(format!("spindle-tui-free-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(free_path(&dir), dir.join("spindle-notebook.md"));
        std::fs::write(dir.join("spindle-notebook.md"), "").unwrap();
        assert_eq!(free_path(&dir), dir.join("spindle-notebook-2.md"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tabs_help_scroll_and_zoom() {
        let mut a = app(&["x"]);
        assert_eq!(a.tab, Tab::Runtime);
        a.on_key(key(KeyCode::Tab));
        assert_eq!(a.tab, Tab::Einsum);
        a.on_key(key(KeyCode::BackTab));
        assert_eq!(a.tab, Tab::Runtime);
        keys(&mut a, "3");
        assert_eq!(a.tab, Tab::C);
        keys(&mut a, "JJ");
        assert_eq!(a.scroll, 6);
        keys(&mut a, "4");
        assert_eq!(a.scroll, 0, "a new tab starts at the top");
        keys(&mut a, "?");
        assert_eq!(a.help, Some(0));
        keys(&mut a, "jjq");
        assert_eq!(a.help, None);
        assert!(!a.should_quit, "q closes help first");
        keys(&mut a, "o");
        assert!(a.zoom);
    }
}
