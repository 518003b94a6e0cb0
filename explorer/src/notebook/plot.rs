//! The runtime plot of a sweep, exported through plotters: median time per
//! sweep point, one line per backend, each baseline a dashed horizontal
//! line.
//!
//! Text in the PNG is drawn with DejaVu Sans from the `dejavu` crate,
//! registered with plotters' `ab_glyph` font backend, so the plot has its
//! labels on machines with no system fonts or fontconfig (plotters' default
//! `ttf` backend needs both). The SVG writes text as `<text>` elements.

use std::path::Path;
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use super::output::{Baseline, Sweep, SweepPoint};

/// Pixels of an exported plot.
pub const SIZE: (u32, u32) = (960, 540);

/// Colours per backend and baseline, in order.
const BACKEND_COLOURS: [RGBColor; 3] =
    [RGBColor(31, 119, 180), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
const BASELINE_COLOURS: [RGBColor; 4] =
    [RGBColor(214, 39, 40), RGBColor(255, 127, 14), RGBColor(140, 86, 75), RGBColor(127, 127, 127)];

/// Registers the bundled font once per process for plotters' text.
pub(crate) fn register_fonts() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut ok = true;
    ONCE.call_once(|| {
        ok = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok();
    });
    if ok { Ok(()) } else { Err(anyhow!("the bundled DejaVu Sans font did not load")) }
}

/// Writes the plot as SVG.
pub fn to_svg(sweep: &Sweep, path: &Path) -> Result<()> {
    register_fonts()?;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(&root, sweep).map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))
}

/// Writes the plot as PNG.
pub fn to_png(sweep: &Sweep, path: &Path) -> Result<()> {
    register_fonts()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, sweep).map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))
}

/// The SVG text of the plot.
#[cfg(test)]
fn svg_string(sweep: &Sweep) -> Result<String> {
    register_fonts()?;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        draw(&root, sweep).map_err(|e| anyhow!("drawing: {e}"))?;
        root.present().map_err(|e| anyhow!("drawing: {e}"))?;
    }
    Ok(text)
}

/// The x-axis label of each sweep point, in `sweep.points` order of first
/// appearance (several backends share a point).
pub fn point_labels(sweep: &Sweep) -> Vec<Vec<String>> {
    let mut labels: Vec<Vec<String>> = Vec::new();
    for p in &sweep.points {
        if !labels.contains(&p.values) {
            labels.push(p.values.clone());
        }
    }
    if labels.is_empty() {
        labels.push(Vec::new());
    }
    labels
}

fn label_text(sweep: &Sweep, values: &[String]) -> String {
    match values.len() {
        0 => "default".into(),
        1 => values[0].clone(),
        _ => {
            sweep.parameters.iter().zip(values).map(|(p, v)| format!("{p}={v}")).collect::<Vec<_>>().join(" ")
        }
    }
}

fn backend_name(backend: &str) -> String {
    match backend {
        "c" => "Spindle C (CPU)".into(),
        "cuda" => "Spindle CUDA (GPU)".into(),
        other => format!("Spindle {other}"),
    }
}

type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The runtime panel, and beneath it a panel of the workspaces' peak bytes
/// where the points have them (sparse outputs gathered in an ISM).
fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, sweep: &Sweep) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let over = if sweep.parameters.is_empty() {
        String::new()
    } else {
        format!(" over {}", sweep.parameters.join(" × "))
    };
    let time = |p: &SweepPoint| p.median_ms;
    if !sweep.points.iter().any(|p| p.workspace_bytes.is_some()) {
        return panel(root, sweep, &format!("median runtime{over}"), "median time (ms)", &time, true);
    }
    let (top, bottom) = root.split_vertically(SIZE.1 * 3 / 5);
    panel(&top, sweep, &format!("median runtime{over}"), "median time (ms)", &time, true)?;
    let kib = |p: &SweepPoint| p.workspace_bytes.map(|b| b as f64 / 1024.0);
    panel(&bottom, sweep, &format!("peak workspace{over}"), "peak workspace (KiB)", &kib, false)
}

/// One metric per sweep point, a line per backend; the baselines' times as
/// dashed lines where `baselines`.
fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    sweep: &Sweep,
    caption: &str,
    y_desc: &str,
    value: &dyn Fn(&SweepPoint) -> Option<f64>,
    baselines: bool,
) -> DrawResult<DB> {
    let labels = point_labels(sweep);
    let n = labels.len() as u32;
    let shown: &[Baseline] = if baselines { &sweep.baselines } else { &[] };
    let values = sweep.points.iter().filter_map(value).chain(shown.iter().map(|b| b.median_ms));
    let top = values.fold(0.0f64, f64::max);
    let top = if top > 0.0 && top.is_finite() { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        // A discrete range holds both ends: n points are 0..=n-1.
        .build_cartesian_2d((0u32..n.saturating_sub(1)).into_segmented(), 0.0..top)?;
    let x_desc =
        if sweep.parameters.is_empty() { "sweep point".to_string() } else { sweep.parameters.join(", ") };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i as usize).map(|l| label_text(sweep, l)).unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()?;

    let mut backends: Vec<&str> = Vec::new();
    for p in &sweep.points {
        if !backends.contains(&p.backend.as_str()) {
            backends.push(&p.backend);
        }
    }
    for (b, backend) in backends.iter().enumerate() {
        let colour = BACKEND_COLOURS[b % BACKEND_COLOURS.len()];
        let series: Vec<(SegmentValue<u32>, f64)> = sweep
            .points
            .iter()
            .filter(|p| p.backend == *backend)
            .filter_map(|p| {
                let x = labels.iter().position(|l| *l == p.values)? as u32;
                Some((SegmentValue::CenterOf(x), value(p)?))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(series.clone(), colour.stroke_width(2)))?
            .label(backend_name(backend))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart.draw_series(series.into_iter().map(|(x, y)| Circle::new((x, y), 4, colour.filled())))?;
    }
    for (i, baseline) in shown.iter().enumerate() {
        let colour = BASELINE_COLOURS[i % BASELINE_COLOURS.len()];
        let y = baseline.median_ms;
        let line = [(SegmentValue::Exact(0), y), (SegmentValue::Last, y)];
        chart
            .draw_series(DashedLineSeries::new(line, 8, 5, colour.stroke_width(2)))?
            .label(format!("{} ({})", baseline.name, if baseline.backend == "cuda" { "GPU" } else { "CPU" }))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    if !backends.is_empty() || !shown.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 15))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notebook::output::{Baseline, SweepPoint};

    fn sweep() -> Sweep {
        let point = |g: &str, ms: Option<f64>| SweepPoint {
            values: vec![g.into()],
            backend: "c".into(),
            median_ms: ms,
            max_rel_error: ms.map(|_| 1e-7),
            error: None,
            workspace_bytes: None,
        };
        Sweep {
            parameters: vec!["g".into()],
            points: vec![
                point("1", Some(0.8)),
                point("2", Some(0.5)),
                point("4", None),
                point("8", Some(0.6)),
            ],
            baselines: vec![Baseline {
                name: "sprs CSR (1 thread)".into(),
                backend: "c".into(),
                median_ms: 0.7,
            }],
        }
    }

    #[test]
    fn svg_has_labels_series_and_baselines() {
        let svg = svg_string(&sweep()).unwrap();
        for text in
            ["median runtime over g", "median time (ms)", "Spindle C (CPU)", "sprs CSR (1 thread) (CPU)"]
        {
            assert!(svg.contains(text), "missing {text:?}");
        }
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split("</text>").next()?.trim()))
            .collect();
        for g in ["1", "2", "4", "8"] {
            assert!(texts.contains(&g), "missing x label {g}: {texts:?}");
        }
        assert!(svg.contains("<polyline"), "no line series");
        // One marker per measured point (g=4 failed) and the legend.
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn bitmaps_have_their_text() {
        register_fonts().unwrap();
        let (w, h) = SIZE;
        let mut pixels = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut pixels, SIZE).into_drawing_area();
            draw(&root, &sweep()).unwrap();
            root.present().unwrap();
        }
        // The caption band at the top holds nothing but the caption's
        // glyphs: without a font it stays white.
        let dark = pixels[..(w * 40 * 3) as usize].chunks(3).filter(|p| p.iter().all(|&c| c < 128)).count();
        assert!(dark > 100, "the caption was not rendered ({dark} dark pixels)");

        let dir = std::env::temp_dir().join(format!("spindle-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("plot.png");
        to_png(&sweep(), &png).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
        let svg = dir.join("plot.svg");
        to_svg(&Sweep::default(), &svg).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().contains("median runtime"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
