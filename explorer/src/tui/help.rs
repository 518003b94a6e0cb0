//! Every key of the explorer, in one table that the `?` screen draws (and
//! the README repeats). Keep it in step with `App::on_key`.

/// (section, keys, what they do).
pub const KEYS: &[(&str, &str, &str)] = &[
    ("Command mode", "Enter", "edit the selected cell"),
    (
        "Command mode",
        "Shift+Enter  Alt+Enter  Ctrl+J",
        "run the cell and move to the next (adds one at the end)",
    ),
    ("Command mode", "Ctrl+Enter  r  Ctrl+R", "run the cell in place"),
    ("Command mode", "R", "run every code cell from the top"),
    ("Command mode", "Esc  Ctrl+C", "cancel the running cell (and the queued ones)"),
    ("Command mode", "j k  ↓ ↑", "select the next / previous cell"),
    ("Command mode", "g G  Home End", "select the first / last cell"),
    ("Command mode", "a  b", "insert a code cell above / below"),
    ("Command mode", "d d", "delete the cell"),
    ("Command mode", "u", "undo the last delete"),
    ("Command mode", "m  y", "make the cell Markdown / code"),
    ("Command mode", "Tab  Shift+Tab", "next / previous output tab"),
    ("Command mode", "1 … 7", "output tab: Einsum, IR, C, CUDA, Format, Resources, Runtime"),
    ("Command mode", "J K  PgDn PgUp  Ctrl+D Ctrl+U", "scroll the output"),
    ("Command mode", "h l  ← →", "scroll the output sideways (long source lines)"),
    ("Command mode", "o", "maximise / restore the output pane"),
    ("Command mode", "q", "quit (press twice when there are unsaved changes)"),
    ("Edit mode", "Esc", "back to command mode (keeps the text)"),
    ("Edit mode", "Shift+Enter  Alt+Enter  Ctrl+J", "run the cell and move to the next"),
    ("Edit mode", "Ctrl+Enter  Ctrl+R", "run the cell in place"),
    ("Edit mode", "Enter  Tab", "new line / indent"),
    ("Edit mode", "Ctrl+Z  Ctrl+Y", "undo / redo"),
    ("Edit mode", "arrows  Home End  PgUp PgDn", "move the cursor"),
    ("Both", "Ctrl+S", "save the notebook (Markdown with fenced spindle cells)"),
    ("Both", "? (command)  F1", "this help; Esc, q or ? closes it"),
];

/// Why some keys have two or three spellings.
pub const NOTE: &str = "Many terminals send Shift+Enter and Ctrl+Enter as a plain Enter; the explorer asks \
     for the keyboard enhancement protocol where the terminal has it, and Alt+Enter, Ctrl+J, r and Ctrl+R \
     work everywhere.";
