//! Errors in a statement, with the span they point at, rendered with a caret
//! under the offending text by ariadne.

use std::fmt;

use super::ast::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// One line: `extent of k is 64 in A but 128 in B`.
    pub message: String,
    /// The text the caret goes under.
    pub span: Span,
    /// The words beside the caret.
    pub label: String,
    /// Other places worth pointing at (the earlier use of an index, ...).
    pub secondary: Vec<(Span, String)>,
    /// Hints after the source excerpt.
    pub notes: Vec<String>,
    /// The key of the schedule item the mistake is in (`order`,
    /// `tile.k`, `reduce`), where it is the schedule's, not the
    /// statement's: a front end that has the schedule's text shows that
    /// item ([`Diagnostic::render_in_schedule`]).
    pub schedule_item: Option<Box<String>>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Self {
        let message = message.into();
        Diagnostic {
            label: message.clone(),
            message,
            span,
            secondary: Vec::new(),
            notes: Vec::new(),
            schedule_item: None,
        }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    pub fn with_secondary(mut self, span: Span, label: impl Into<String>) -> Self {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The mistake is in the schedule item with key `key`.
    pub fn in_schedule_item(mut self, key: impl Into<String>) -> Self {
        self.schedule_item = Some(Box::new(key.into()));
        self
    }

    /// [`Diagnostic::render`] over the schedule's text `schedule`, its
    /// caret under the item the mistake is in; `None` where the
    /// diagnostic is not about one, or the text has no such item (a
    /// schedule the autotuner chose).
    pub fn render_in_schedule(&self, schedule: &str, color: bool) -> Option<String> {
        let key = self.schedule_item.as_deref()?.as_str();
        let at = crate::kernel::schedule::item_span(schedule, key)?;
        Some(self.at_schedule_item(at).render_named(schedule, "schedule", color))
    }

    /// The diagnostic with its caret under `at`, where its schedule item
    /// was written (in the schedule's text, or a notebook cell's line).
    pub fn at_schedule_item(&self, at: Span) -> Diagnostic {
        Diagnostic { span: at, label: "this item".to_string(), secondary: Vec::new(), ..self.clone() }
    }

    /// The diagnostic with the statement excerpt and carets, as a terminal
    /// shows it. `color` adds ANSI colours.
    pub fn render(&self, source: &str, color: bool) -> String {
        self.render_named(source, "statement", color)
    }

    /// [`Diagnostic::render`] of a source called `name` (`cell` in a
    /// notebook).
    pub fn render_named(&self, source: &str, name: &str, color: bool) -> String {
        use ariadne::{Config, IndexType, Label, Report, ReportKind, Source};
        let clamp = |s: Span| {
            let end = s.end.min(source.len());
            let start = s.start.min(end);
            start..end.max(start)
        };
        // In the order they stand in the source: ariadne starts a new
        // excerpt, headed with the wrong line, at a label above the one
        // before it.
        let mut labels: Vec<(Span, &str)> = std::iter::once((self.span, self.label.as_str()))
            .chain(self.secondary.iter().map(|(span, label)| (*span, label.as_str())))
            .collect();
        labels.sort_by_key(|(span, _)| span.start);
        let mut report = Report::build(ReportKind::Error, (name, clamp(self.span)))
            .with_config(Config::default().with_color(color).with_index_type(IndexType::Byte))
            .with_message(&self.message);
        for (span, label) in labels {
            report = report.with_label(Label::new((name, clamp(span))).with_message(label));
        }
        for note in &self.notes {
            report = report.with_note(note);
        }
        let mut out = Vec::new();
        let written = report.finish().write((name, Source::from(source)), &mut out);
        match written {
            Ok(()) => String::from_utf8_lossy(&out).into_owned(),
            Err(_) => format!("error: {}", self.message),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}
