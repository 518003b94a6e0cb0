//! Drawing: the cell list, the output pane with its tabs, the status line
//! and the help screen. Reads the `App`; the only state it writes back is
//! layout bookkeeping (list offset, page height, clamped scroll).

use std::collections::BTreeSet;

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{
    Axis, Bar, BarChart, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, LegendPosition, Paragraph,
    Row, Table, Tabs, Wrap,
};

use super::app::{App, Level, Mode, Tab, UiCell};
use super::help;
use super::highlight;
use crate::notebook::markdown::CellKind as Kind;
use crate::notebook::output::{CellOutput, FormatView, SweepPoint};

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// Source lines shown for a cell that is not selected.
const FOLDED_LINES: usize = 8;

pub fn draw(frame: &mut Frame, app: &mut App) {
    let [main, status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(frame.area());
    if app.zoom {
        draw_output(frame, main, app);
    } else {
        let [cells, output] =
            Layout::vertical([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(main);
        draw_cells(frame, cells, app);
        draw_output(frame, output, app);
    }
    draw_status(frame, status, app);
    if let Some(scroll) = app.help {
        draw_help(frame, frame.area(), scroll);
    }
}

// ---- the cell list ----

/// The lines a cell shows: Markdown keeps the blank lines around it in the
/// file, which only waste rows here.
fn shown_lines(source: &str) -> Vec<&str> {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines.iter().position(|l| !l.trim().is_empty()).unwrap_or(lines.len());
    let end = lines.iter().rposition(|l| !l.trim().is_empty()).map_or(start, |e| e + 1);
    lines[start..end].to_vec()
}

fn cell_height(app: &App, index: usize, max: u16) -> u16 {
    let shown = match &app.editor {
        // Room for the cursor on a new last line.
        Some(editor) if index == app.selected => editor.lines().len() + 1,
        _ if index == app.selected => shown_lines(&app.cells[index].source).len().max(1),
        _ => shown_lines(&app.cells[index].source).len().clamp(1, FOLDED_LINES),
    };
    (shown as u16 + 2).min(max.max(3))
}

fn draw_cells(frame: &mut Frame, area: Rect, app: &mut App) {
    // Keep the selected cell on screen: scroll the list just enough.
    app.list_offset = app.list_offset.min(app.selected);
    while app.list_offset < app.selected {
        let total: u16 = (app.list_offset..=app.selected).map(|i| cell_height(app, i, area.height)).sum();
        if total <= area.height {
            break;
        }
        app.list_offset += 1;
    }
    let mut y = area.y;
    for index in app.list_offset..app.cells.len() {
        if y >= area.bottom() {
            break;
        }
        let height = cell_height(app, index, area.height).min(area.bottom() - y);
        let rect = Rect { x: area.x, y, width: area.width, height };
        draw_cell(frame, rect, app, index);
        y += height;
    }
}

fn draw_cell(frame: &mut Frame, area: Rect, app: &App, index: usize) {
    let cell = &app.cells[index];
    let selected = index == app.selected;
    let border = match (selected, app.mode) {
        (true, Mode::Edit) => Style::default().fg(Color::Green),
        (true, Mode::Command) => Style::default().fg(Color::Cyan),
        _ => Style::default().fg(Color::DarkGray),
    };
    let count = match (app.is_pending(cell.id), cell.count) {
        (true, _) => "[*]".to_string(),
        (false, Some(n)) => format!("[{n}]"),
        (false, None) => "[ ]".to_string(),
    };
    let marker = if selected { "▶ " } else { "  " };
    let kind = match cell.kind {
        Kind::Spindle => "spindle",
        Kind::Markdown => "markdown",
    };
    let mut block = Block::bordered()
        .border_style(border)
        .title(Line::from(vec![Span::raw(marker), Span::raw(format!("{count} {kind} "))]));
    if let Some(summary) = cell_summary(app, cell) {
        block = block.title_top(summary.right_aligned());
    }
    if selected && let Some(editor) = &app.editor {
        let inner = block.inner(area);
        frame.render_widget(block, area);
        frame.render_widget(editor, inner);
        return;
    }
    let lines = shown_lines(&cell.source);
    let text: Vec<Line> =
        match cell.kind {
            _ if lines.is_empty() => vec![Line::from("(empty: Enter edits)").dark_gray()],
            Kind::Spindle => lines.iter().map(|l| Line::raw(l.to_string())).collect(),
            Kind::Markdown => lines
                .iter()
                .map(|l| {
                    if l.starts_with('#') {
                        Line::from(l.to_string()).bold()
                    } else {
                        Line::raw(l.to_string())
                    }
                })
                .collect(),
        };
    frame.render_widget(Paragraph::new(text).block(block), area);
}

/// The right-hand title of a cell: progress while it runs, else a summary
/// of its last output (time, fastest point), else nothing.
fn cell_summary(app: &App, cell: &UiCell) -> Option<Line<'static>> {
    if let Some(r) = app.running.as_ref().filter(|r| r.id == cell.id) {
        let p = &r.progress;
        let text = if p.total > 0 {
            format!(" {} {}/{} {} ", spinner(app), p.done, p.total, p.message)
        } else {
            format!(" {} running ", spinner(app))
        };
        return Some(Line::from(text).yellow());
    }
    let out = cell.output.as_ref()?;
    let stale = if cell.stale { " (edited since)" } else { "" };
    if let Some(error) = &out.error {
        let first = error.lines().next().unwrap_or("");
        return Some(Line::from(format!(" ✗ {}{stale} ", truncate(first, 50))).red());
    }
    let mut text = format!(" {} {:.2} s", if out.cancelled { "⊘ cancelled ·" } else { "✓" }, out.seconds);
    if let Some((p, ms)) = fastest(&out.sweep.points) {
        text +=
            &format!(" · best {} ({}, {})", ms_text(ms), p.backend, point_label(&out.sweep.parameters, p));
    }
    text += stale;
    text.push(' ');
    Some(Line::from(text).green())
}

fn spinner(app: &App) -> &'static str {
    let ms = app.running.as_ref().map(|r| r.started.elapsed().as_millis()).unwrap_or(0);
    SPINNER[(ms / 100) as usize % SPINNER.len()]
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

/// The fastest measured point of a sweep.
fn fastest(points: &[SweepPoint]) -> Option<(&SweepPoint, f64)> {
    points.iter().filter_map(|p| p.median_ms.map(|ms| (p, ms))).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// "g=4 reduce=atomic", or "(one point)" for a cell without a sweep.
fn point_label(parameters: &[String], p: &SweepPoint) -> String {
    if p.values.is_empty() {
        return "one point".into();
    }
    let pairs: Vec<String> = parameters.iter().zip(&p.values).map(|(k, v)| format!("{k}={v}")).collect();
    if pairs.is_empty() { p.values.join(" ") } else { pairs.join(" ") }
}

fn ms_text(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{} ms", crate::bench::ms(Some(ms)))
    }
}

fn bytes_text(b: usize) -> String {
    match b {
        _ if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        _ if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        // Below 10 KiB the exact count, so neighbouring g stay apart.
        _ if b >= 10 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{b} B"),
    }
}

// ---- the output pane ----

fn draw_output(frame: &mut Frame, area: Rect, app: &mut App) {
    let index = app.selected;
    let cell = &app.cells[index];
    let mut block = Block::bordered().title(format!(" output of cell {} ", index + 1));
    if let Some(out) = &cell.output {
        let mut info = format!(" ran in {:.2} s ", out.seconds);
        if let Some(n) = cell.count {
            info = format!(" run [{n}] ·{info}");
        }
        block = block.title_top(Line::from(info).right_aligned());
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [tabs, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
    let titles: Vec<String> =
        Tab::ALL.iter().enumerate().map(|(i, t)| format!("{} {}", i + 1, t.title())).collect();
    frame.render_widget(
        Tabs::new(titles)
            .select(app.tab.index())
            .highlight_style(Style::default().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD)),
        tabs,
    );
    app.page = body.height;

    let mut body = body;
    // A cell that runs shows its progress above the previous output.
    if let Some(r) = app.running.as_ref().filter(|r| r.id == cell.id) {
        let [line, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(body);
        let p = &r.progress;
        let fraction = if p.total == 0 { 0.0 } else { p.done as f64 / p.total as f64 };
        let width = 20usize;
        let filled = ((fraction * width as f64).round() as usize).min(width);
        let text = format!(
            "{} [{}{}] {}/{} {}{} · {:.1} s",
            spinner(app),
            "█".repeat(filled),
            "░".repeat(width - filled),
            p.done,
            p.total,
            p.message,
            if r.cancelling { " (cancelling)" } else { "" },
            r.started.elapsed().as_secs_f64()
        );
        frame.render_widget(Paragraph::new(text).yellow(), line);
        body = rest;
    } else if app.is_pending(cell.id) {
        let [line, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(body);
        frame.render_widget(Paragraph::new("queued: waits for the running cell").yellow(), line);
        body = rest;
    }

    let cell = &app.cells[index];
    let Some(out) = &cell.output else {
        let hint = match cell.kind {
            Kind::Markdown => "A Markdown cell: nothing to run.",
            Kind::Spindle if app.is_pending(cell.id) => "",
            Kind::Spindle => {
                "Not run yet: r or Ctrl+Enter runs it here, Shift+Enter (or Alt+Enter, Ctrl+J) runs it and moves on."
            }
        };
        frame.render_widget(Paragraph::new(hint).dark_gray().wrap(Wrap { trim: false }), body);
        return;
    };
    if let Some(error) = &out.error {
        let lines = error.lines().count() as u16 + 2;
        let height = if out.rewritten.is_empty() && out.sweep.points.is_empty() {
            body.height
        } else {
            lines.min(body.height / 2)
        };
        let [top, rest] = Layout::vertical([Constraint::Length(height), Constraint::Min(0)]).areas(body);
        let block = Block::bordered().title(" error ").border_style(Style::default().fg(Color::Red));
        frame.render_widget(Paragraph::new(error.as_str()).red().block(block), top);
        body = rest;
    } else if out.cancelled {
        let [line, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(body);
        frame.render_widget(Paragraph::new("cancelled: the points that finished are shown").yellow(), line);
        body = rest;
    }
    if body.height == 0 {
        return;
    }
    let text = match app.tab {
        Tab::Einsum => einsum_text(out, body.width),
        Tab::Ir => {
            sections(out, &out.ir, "kernel IR", |s| s.lines().map(|l| Line::raw(l.to_string())).collect())
        }
        Tab::C => sections(out, &out.c_source, "C source", highlight::highlight),
        Tab::Cuda => sections(out, &out.cuda_source, "CUDA source", highlight::highlight),
        Tab::Format => return draw_formats(frame, body, &out.formats),
        Tab::Resources => return draw_resources(frame, body, out),
        Tab::Runtime => return draw_runtime(frame, body, out),
    };
    let max = (text.len() as u16).saturating_sub(body.height);
    app.scroll = app.scroll.min(max);
    let widest = text.iter().map(Line::width).max().unwrap_or(0) as u16;
    app.hscroll = app.hscroll.min(widest.saturating_sub(body.width));
    frame.render_widget(Paragraph::new(text).scroll((app.scroll, app.hscroll)), body);
}

/// One section per statement, headed when there are several.
fn sections(
    out: &CellOutput,
    items: &[String],
    what: &str,
    lines: impl Fn(&str) -> Vec<Line<'static>>,
) -> Vec<Line<'static>> {
    if items.is_empty() {
        return vec![Line::from(format!("No {what} for this cell.")).dark_gray()];
    }
    let mut text = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if items.len() > 1 {
            if i > 0 {
                text.push(Line::raw(""));
            }
            text.push(Line::from(format!("── {} ──", out.code_label(i))).dark_gray());
        }
        text.extend(lines(item));
    }
    text
}

fn einsum_text(out: &CellOutput, width: u16) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from("The indirect Einsum that runs:").bold()];
    if out.rewritten.is_empty() {
        lines.push(Line::from("  (none)").dark_gray());
    }
    for s in &out.rewritten {
        let mut line = highlight::einsum_line(s);
        line.spans.insert(0, Span::raw("  "));
        lines.push(line);
    }
    for v in &out.formats {
        lines.push(Line::raw(""));
        lines.push(Line::from(format!("{} stored as {}", v.tensor, v.spec)));
    }
    if !out.notes.is_empty() {
        lines.push(Line::raw(""));
        for note in &out.notes {
            let wrapped = wrap_words(&format!("note: {note}"), width.max(20) as usize);
            lines.extend(wrapped.into_iter().map(|l| Line::from(l).yellow()));
        }
    }
    lines
}

/// Greedy word wrap: notes are prose and should not run off the pane.
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().expect("starts with one line");
        let len = last.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(format!("      {word}"));
        } else {
            if len > 0 {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

fn draw_formats(frame: &mut Frame, area: Rect, views: &[FormatView]) {
    if views.is_empty() {
        frame
            .render_widget(Paragraph::new("No sparse operand with a format in this cell.").dark_gray(), area);
        return;
    }
    let shown = &views[..views.len().min(3)];
    let areas = Layout::vertical(shown.iter().map(|_| Constraint::Fill(1))).split(area);
    for (view, &rect) in shown.iter().zip(areas.iter()) {
        draw_format(frame, rect, view);
    }
}

fn draw_format(frame: &mut Frame, area: Rect, view: &FormatView) {
    let s = &view.stats;
    let g = &s.grouping;
    let o = &s.occupancy;
    let header = vec![
        Line::from(vec![
            Span::styled(format!("{} ", view.tensor), Style::default().fg(Color::Cyan).bold()),
            Span::styled(view.spec.clone(), Style::default().bold()),
            Span::raw(format!(
                "  {}×{}  nnz {}  stored {}  padding {:.1}%  {}",
                s.rows,
                s.cols,
                s.nnz,
                s.stored,
                100.0 * s.padding_ratio,
                bytes_text(s.bytes)
            )),
        ]),
        Line::from(format!(
            "{} per slice of dim {}: min {}  median {}  mean {:.2}  max {}",
            s.group_unit, s.group_dim, o.min, o.median, o.mean, o.max
        )),
        Line::from(format!(
            "g* = √(S/n) = {:.2} (between {} and {}); F(g) is least at g = {}",
            g.g_star, g.g_star_pow2[0], g.g_star_pow2[1], g.g_best
        )),
    ];
    let [top, rest] = Layout::vertical([Constraint::Length(3), Constraint::Min(0)]).areas(area);
    frame.render_widget(Paragraph::new(header).wrap(Wrap { trim: true }), top);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(rest);

    let bars: Vec<Bar> = o
        .histogram
        .iter()
        .map(|b| {
            let label = if b.lo == b.hi { b.lo.to_string() } else { format!("{}–{}", b.lo, b.hi) };
            Bar::with_label(label, b.count as u64)
        })
        .collect();
    let chart = BarChart::horizontal(bars)
        .bar_width(1)
        .bar_gap(0)
        .bar_style(Style::default().fg(Color::Cyan))
        .block(Block::bordered().title(format!(" slices by occupancy ({}) ", s.group_unit)));
    frame.render_widget(chart, left);

    let mut gs: BTreeSet<usize> = g.f_of_g.keys().copied().collect();
    gs.extend(view.per_g.iter().map(|p| p.0));
    let rows: Vec<Row> = gs
        .iter()
        .map(|&gv| {
            let swept = view.per_g.iter().find(|p| p.0 == gv);
            let padding = swept.map(|p| p.2).or_else(|| g.padding_of_g.get(&gv).copied());
            let mut marks = Vec::new();
            if gv == g.g_best {
                marks.push("★ least F");
            }
            if g.g_star_pow2.contains(&gv) {
                marks.push("≈ g*");
            }
            let style =
                if gv == g.g_best { Style::default().fg(Color::Yellow).bold() } else { Style::default() };
            Row::new(vec![
                Cell::from(gv.to_string()),
                Cell::from(g.f_of_g.get(&gv).map(|f| f.to_string()).unwrap_or_else(|| "–".into())),
                Cell::from(padding.map(|p| format!("{:.1}%", 100.0 * p)).unwrap_or_else(|| "–".into())),
                Cell::from(swept.map(|p| bytes_text(p.1)).unwrap_or_else(|| "–".into())),
                Cell::from(marks.join(", ")),
            ])
            .style(style)
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(5),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Min(8),
        ],
    )
    .header(Row::new(vec!["g", "F(g)", "padding", "bytes", ""]).bold().underlined())
    .block(Block::bordered().title(" g → F(g) = (g+1)·Σ⌈occ/g⌉ "));
    frame.render_widget(table, right);
}

fn draw_resources(frame: &mut Frame, area: Rect, out: &CellOutput) {
    if out.resources.is_empty() {
        let mut lines = vec![Line::from("No NVRTC report for this cell.").dark_gray()];
        lines.extend(out.notes.iter().map(|n| Line::from(format!("note: {n}")).yellow()));
        frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
        return;
    }
    let rows: Vec<Row> = out
        .resources
        .iter()
        .map(|r| {
            let spill = Cell::from(r.spill_bytes.to_string());
            Row::new(vec![
                Cell::from(r.point.clone()),
                Cell::from(r.arch.clone()),
                Cell::from(r.registers.to_string()),
                Cell::from(r.shared_bytes.to_string()),
                Cell::from(r.stack_bytes.to_string()),
                if r.spill_bytes > 0 { spill.red().bold() } else { spill },
                Cell::from(r.launch.clone()),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Min(12),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Min(14),
        ],
    )
    .header(
        Row::new(vec![
            "point",
            "arch",
            "registers",
            "shared (B)",
            "stack (B)",
            "spills (B)",
            "launch (grid × block)",
        ])
        .bold()
        .underlined(),
    );
    frame.render_widget(table, area);
}

fn backend_name(backend: &str) -> &str {
    match backend {
        "c" => "C (CPU)",
        "cuda" => "CUDA (GPU)",
        other => other,
    }
}

/// Milliseconds as an axis label: as few digits as the scale needs.
fn ms_label(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else if ms >= 0.1 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.3}")
    }
}

fn draw_runtime(frame: &mut Frame, area: Rect, out: &CellOutput) {
    let sweep = &out.sweep;
    if sweep.points.is_empty() && sweep.baselines.is_empty() {
        frame.render_widget(Paragraph::new("No measurements in this output.").dark_gray(), area);
        return;
    }
    // x: the sweep points in the order they first appear; one series per backend.
    let mut labels: Vec<String> = Vec::new();
    let mut backends: Vec<&str> = Vec::new();
    for p in &sweep.points {
        let l = point_label(&sweep.parameters, p);
        if !labels.contains(&l) {
            labels.push(l);
        }
        if !backends.contains(&p.backend.as_str()) {
            backends.push(&p.backend);
        }
    }
    // y: log10 of the time. Baselines are often 10-100x off the kernels,
    // and a linear axis would flatten every kernel point onto zero.
    let all_ms: Vec<f64> = sweep
        .points
        .iter()
        .filter_map(|p| p.median_ms)
        .chain(sweep.baselines.iter().map(|b| b.median_ms))
        .filter(|ms| *ms > 0.0)
        .collect();
    let lo = all_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all_ms.iter().copied().fold(0.0f64, f64::max);
    let (y_lo, y_hi) =
        if all_ms.is_empty() { (-1.0, 1.0) } else { ((lo / 1.25).log10(), (hi * 1.25).log10()) };
    let x_max = labels.len().saturating_sub(1).max(1) as f64;
    let series: Vec<Vec<(f64, f64)>> = backends
        .iter()
        .map(|b| {
            sweep
                .points
                .iter()
                .filter(|p| p.backend == *b)
                .filter_map(|p| {
                    let x = labels.iter().position(|l| *l == point_label(&sweep.parameters, p))?;
                    let ms = p.median_ms.filter(|ms| *ms > 0.0)?;
                    Some((x as f64, ms.log10()))
                })
                .collect()
        })
        .collect();
    let flat: Vec<Vec<(f64, f64)>> = sweep
        .baselines
        .iter()
        .map(|b| {
            let y = b.median_ms.max(1e-9).log10();
            vec![(0.0, y), (x_max, y)]
        })
        .collect();

    let series_colors = [Color::Cyan, Color::Green, Color::LightBlue];
    let baseline_colors = [Color::Yellow, Color::Magenta, Color::Red, Color::LightYellow];
    let mut datasets = Vec::new();
    for (i, (b, data)) in backends.iter().zip(&series).enumerate() {
        datasets.push(
            Dataset::default()
                .name(format!("Spindle {}", backend_name(b)))
                .marker(Marker::Braille)
                .graph_type(if data.len() > 1 { GraphType::Line } else { GraphType::Scatter })
                .style(Style::default().fg(series_colors[i % series_colors.len()]))
                .data(data),
        );
    }
    for (i, (b, data)) in sweep.baselines.iter().zip(&flat).enumerate() {
        datasets.push(
            Dataset::default()
                .name(format!("{} ({})", b.name, if b.backend == "cuda" { "GPU" } else { "CPU" }))
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::default().fg(baseline_colors[i % baseline_colors.len()]))
                .data(data),
        );
    }
    let x_labels: Vec<Line> = if labels.len() <= 8 {
        labels.iter().map(|l| Line::from(l.clone())).collect()
    } else {
        vec![
            Line::from(labels[0].clone()),
            Line::from(labels[labels.len() / 2].clone()),
            Line::from(labels[labels.len() - 1].clone()),
        ]
    };
    // Labels spread evenly over the axis, so evenly in log space.
    let y_labels: Vec<Line> =
        (0..4).map(|k| Line::from(ms_label(10f64.powf(y_lo + (y_hi - y_lo) * k as f64 / 3.0)))).collect();
    let x_title = if sweep.parameters.is_empty() { "point".to_string() } else { sweep.parameters.join(", ") };
    let chart = Chart::new(datasets)
        .block(Block::bordered().title(" median time per sweep point (ms, log scale; lower is better) "))
        .x_axis(
            Axis::default()
                .title(x_title)
                .bounds([0.0, x_max])
                .labels(x_labels)
                .labels_alignment(Alignment::Center),
        )
        .y_axis(Axis::default().bounds([y_lo, y_hi]).labels(y_labels))
        .legend_position(Some(LegendPosition::TopRight))
        .hidden_legend_constraints((Constraint::Percentage(60), Constraint::Percentage(60)));

    let table_rows = sweep.points.len() + sweep.baselines.len() + 1;
    let table_height = (table_rows as u16).min(area.height / 2).max(3.min(area.height));
    let [top, bottom] = Layout::vertical([Constraint::Min(0), Constraint::Length(table_height)]).areas(area);
    frame.render_widget(chart, top);

    let best = fastest(&sweep.points).map(|(p, _)| p as *const SweepPoint);
    let mut rows: Vec<Row> = sweep
        .points
        .iter()
        .map(|p| {
            // The fastest baseline on the same backend, for the speed-up column.
            let baseline = sweep
                .baselines
                .iter()
                .filter(|b| b.backend == p.backend)
                .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms));
            let speedup = match (p.median_ms, baseline) {
                (Some(ms), Some(b)) if ms > 0.0 => format!("×{:.2} vs {}", b.median_ms / ms, b.name),
                _ => String::new(),
            };
            let is_best = best == Some(p as *const SweepPoint);
            let row = Row::new(vec![
                Cell::from(format!(
                    "{}{}",
                    if is_best { "★ " } else { "  " },
                    point_label(&sweep.parameters, p)
                )),
                Cell::from(backend_name(&p.backend).to_string()),
                Cell::from(p.median_ms.map(ms_text).unwrap_or_else(|| "failed".into())),
                Cell::from(p.max_rel_error.map(|e| format!("{e:.1e}")).unwrap_or_default()),
                Cell::from(p.error.clone().unwrap_or(speedup)),
            ]);
            if p.error.is_some() {
                row.red()
            } else if is_best {
                row.yellow().bold()
            } else {
                row
            }
        })
        .collect();
    rows.extend(sweep.baselines.iter().map(|b| {
        Row::new(vec![
            Cell::from(format!("  {}", b.name)),
            Cell::from(format!("{} baseline", if b.backend == "cuda" { "GPU" } else { "CPU" })),
            Cell::from(ms_text(b.median_ms)),
            Cell::from(""),
            Cell::from(""),
        ])
        .dark_gray()
    }));
    let first = sweep
        .points
        .iter()
        .map(|p| point_label(&sweep.parameters, p).chars().count())
        .chain(sweep.baselines.iter().map(|b| b.name.chars().count()))
        .max()
        .unwrap_or(8) as u16
        + 3;
    let table = Table::new(
        rows,
        [
            Constraint::Length(first.min(40)),
            Constraint::Length(13),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new(vec!["point", "backend", "median", "rel err", "speed-up over the fastest baseline"])
            .bold()
            .underlined(),
    );
    frame.render_widget(table, bottom);
}

// ---- status line and help ----

fn draw_status(frame: &mut Frame, area: Rect, app: &App) {
    let (mode, mode_style) = match app.mode {
        Mode::Command => (" COMMAND ", Style::default().fg(Color::Black).bg(Color::Cyan).bold()),
        Mode::Edit => (" EDIT ", Style::default().fg(Color::Black).bg(Color::Green).bold()),
    };
    let mut left = vec![Span::styled(mode, mode_style), Span::raw(" "), Span::raw(app.title())];
    if app.is_dirty() {
        left.push(Span::styled(" [+]", Style::default().fg(Color::Yellow).bold()));
    }
    if let Some(r) = &app.running {
        let index = app.cells.iter().position(|c| c.id == r.id).map(|i| i + 1).unwrap_or(0);
        let p = &r.progress;
        left.push(Span::styled(
            format!(
                "  {} cell {index}: {}/{} {} ({:.1} s){}",
                spinner(app),
                p.done,
                p.total,
                p.message,
                r.started.elapsed().as_secs_f64(),
                if r.cancelling { " cancelling" } else { " · Esc cancels" }
            ),
            Style::default().fg(Color::Yellow),
        ));
    }
    if let Some(m) = &app.message {
        let color = match m.level {
            Level::Info => Color::Gray,
            Level::Warn => Color::Yellow,
            Level::Error => Color::Red,
        };
        left.push(Span::styled(format!("  {}", m.text), Style::default().fg(color)));
    }
    // One note fits: the GPU one when there is one (it says which backends
    // ran); the Einsum tab lists them all.
    // Two spaces keep a cut-off message apart from the note.
    let mut right = String::from("  ");
    if let Some(note) = app.notes.iter().find(|n| n.contains("GPU")).or(app.notes.first()) {
        right += &truncate(note, (area.width / 3).max(12) as usize);
        if app.notes.len() > 1 {
            right += &format!(" (+{} in tab 1)", app.notes.len() - 1);
        }
        right.push_str("  ");
    }
    right.push_str("? help ");
    let width = (right.chars().count() as u16).min(area.width / 2);
    let [l, r] = Layout::horizontal([Constraint::Min(0), Constraint::Length(width)]).areas(area);
    frame.render_widget(Paragraph::new(Line::from(left)), l);
    frame.render_widget(Paragraph::new(right).yellow().alignment(Alignment::Right), r);
}

fn draw_help(frame: &mut Frame, area: Rect, scroll: u16) {
    let width = area.width.saturating_sub(4).min(100);
    let height = area.height.saturating_sub(2);
    let rect =
        Rect { x: area.x + (area.width - width) / 2, y: area.y + (area.height - height) / 2, width, height };
    let keys_width = help::KEYS.iter().map(|k| k.1.chars().count()).max().unwrap_or(10) + 2;
    let mut lines: Vec<Line> = Vec::new();
    let mut section = "";
    for &(sec, keys, what) in help::KEYS {
        if sec != section {
            if !section.is_empty() {
                lines.push(Line::raw(""));
            }
            lines.push(Line::from(sec).bold().underlined());
            section = sec;
        }
        lines.push(Line::from(vec![
            Span::styled(format!("  {keys:<keys_width$}"), Style::default().fg(Color::Cyan)),
            Span::raw(what),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(help::NOTE).dark_gray());
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" keys ")
        .title_bottom(Line::from(" Esc, q or ? closes · j/k scroll ").right_aligned());
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(Text::from(lines)).wrap(Wrap { trim: false }).scroll((scroll, 0)).block(block),
        rect,
    );
}
