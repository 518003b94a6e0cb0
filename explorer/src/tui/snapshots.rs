//! Snapshots of the explorer's screens, drawn on ratatui's TestBackend from
//! hand-built outputs (no engine, no terminal).

use std::sync::Arc;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use spindle_formats::stats::{ArrayInfo, GroupAnalysis, Occupancy, Stats};

use super::app::tests::{Fake, key, keys};
use super::app::{App, Mode, Tab};
use super::ui;
use crate::notebook::markdown::Cell;
use crate::notebook::output::{Baseline, CellOutput, FormatView, ResourceRow, Sweep, SweepPoint};

const C_SOURCE: &str = r#"#include <omp.h>
// C[AM[p],n] += AV[p,q] * B[AK[p,q],n]
void spmm(const int* AM, const int* AK, const float* AV, const float* B, float* C) {
  #pragma omp parallel for
  for (long p = 0; p < 1354; p++) {
    for (long q = 0; q < 2; q++) {
      float v = AV[p * 2 + q]; /* padded slots hold 0.0f */
      for (long n = 0; n < 64; n++) C[AM[p] * 64 + n] += v * B[AK[p * 2 + q] * 64 + n];
    }
  }
}"#;

const CUDA_SOURCE: &str = r#"extern "C" __global__ void spmm(const int* AM, const float* AV, float* C) {
  __shared__ float tile[64];
  long p = blockIdx.x * 8 + threadIdx.y;
  atomicAdd(&C[AM[p] * 64 + threadIdx.x], AV[p] * 1.0f);
  __syncthreads();
}"#;

/// A GroupCOO view of a small power-law-ish occupancy.
fn format_view() -> FormatView {
    let occupancy = [0usize, 1, 1, 2, 2, 3, 4, 4, 5, 7, 9, 12, 17, 30];
    let grouping = GroupAnalysis::new(&occupancy);
    let stats = Stats {
        format: "groupcoo:dim=0,g=2".into(),
        shape: vec![14, 40],
        rows: 14,
        cols: 40,
        nnz: 97,
        stored: 110,
        padding_ratio: 13.0 / 110.0,
        arrays: vec![ArrayInfo { name: "val".into(), dtype: "f32".into(), len: 110, bytes: 440 }],
        bytes: 1100,
        group_dim: 0,
        group_unit: "entries".into(),
        occupancy: Occupancy::new(&occupancy),
        grouping,
    };
    FormatView {
        tensor: "A".into(),
        spec: "groupcoo:dim=0,g=2".into(),
        stats,
        per_g: vec![(1, 1164, 0.0), (2, 1100, 0.118), (4, 1248, 0.235), (8, 1566, 0.4)],
    }
}

fn point(g: &str, ms: Option<f64>) -> SweepPoint {
    SweepPoint {
        values: vec![g.into()],
        backend: "c".into(),
        median_ms: ms,
        max_rel_error: ms.map(|_| 2.4e-7),
        error: if ms.is_none() { Some("compile failed: out of registers".into()) } else { None },
        workspace_bytes: None,
    }
}

/// A finished SpMM sweep over g on the C backend.
pub(crate) fn output() -> CellOutput {
    CellOutput {
        error: None,
        rewritten: vec!["C[AM[p],n] += AV[p,q] * B[AK[p,q],n]".into()],
        ir: vec![
            "kernel spmm grid(p/8)\n  tile p: 8, n: 64\n  for q in 0..2:\n    acc[p,n] += AV[p,q] * B[AK[p,q],n]\n  scatter C[AM[p],n] += acc (atomic)".into(),
        ],
        c_source: vec![C_SOURCE.into()],
        cuda_source: vec![CUDA_SOURCE.into()],
        code_labels: Vec::new(),
        formats: vec![format_view()],
        resources: vec![
            ResourceRow {
                point: "g=1".into(),
                arch: "sm_80".into(),
                registers: 32,
                shared_bytes: 2048,
                stack_bytes: 0,
                spill_bytes: 0,
                launch: "(170,1,1) × (64,8,1)".into(),
            },
            ResourceRow {
                point: "g=8".into(),
                arch: "sm_90".into(),
                registers: 255,
                shared_bytes: 8192,
                stack_bytes: 16,
                spill_bytes: 24,
                launch: "(22,1,1) × (64,8,1)".into(),
            },
        ],
        sweep: Sweep {
            parameters: vec!["g".into()],
            points: vec![
                point("1", Some(0.91)),
                point("2", Some(0.62)),
                point("4", Some(0.70)),
                point("8", Some(1.35)),
                point("16", None),
            ],
            baselines: vec![
                Baseline { name: "sprs CSR".into(), backend: "c".into(), median_ms: 1.10 },
                Baseline { name: "faer".into(), backend: "c".into(), median_ms: 0.84 },
            ],
        },
        notes: vec!["C backend only: no GPU".into()],
        seconds: 1.25,
        cancelled: false,
    }
}

const CELL: &str = "A = load cora\nB = rand 2708x64 f32 seed=1\nC[m,n] += A[m,k] * B[k,n]\nformat A = groupcoo:dim=0,g=auto\nsweep g in [1, 2, 4, 8, 16]\n";

fn notebook() -> App {
    let cells = vec![
        Cell::markdown("# SpMM with GroupCOO on cora\n\nRows are grouped g entries at a time.\n\n"),
        Cell::spindle(CELL),
        Cell::spindle("y[i] = A[i,j] * x[j]\n"),
    ];
    App::new(cells, Some("spmm.md".into()), Arc::new(Fake(CellOutput::default())))
}

/// The notebook with cell 2 selected and holding `output`.
fn with_output(output: CellOutput) -> App {
    let mut app = notebook();
    keys(&mut app, "j");
    app.cells[1].output = Some(output);
    app.cells[1].count = Some(1);
    app.notes = app.cells[1].output.as_ref().unwrap().notes.clone();
    app
}

fn render(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| ui::draw(frame, app)).unwrap();
    terminal.backend().to_string()
}

#[test]
fn notebook_view() {
    let mut app = notebook();
    let screen = render(&mut app, 100, 32);
    assert!(screen.contains("▶ [ ] markdown"));
    assert!(screen.contains("sweep g in [1, 2, 4, 8, 16]"));
    assert!(screen.contains("A Markdown cell: nothing to run."));
    assert!(screen.contains(" COMMAND  spmm.md"));
    insta::assert_snapshot!("notebook", screen);
}

#[test]
fn each_output_tab() {
    let mut app = with_output(output());
    // Runtime first: it is the tab a run lands on.
    let expected: [(Tab, &[&str]); 7] = [
        (Tab::Runtime, &["★ g=2", "0.620 ms", "×1.35 vs faer", "sprs CSR", "failed", "compile failed"]),
        (Tab::Einsum, &["C[AM[p],n] += AV[p,q] * B[AK[p,q],n]", "A stored as groupcoo:dim=0,g=2"]),
        (Tab::Ir, &["kernel spmm grid(p/8)", "scatter C[AM[p],n]"]),
        (Tab::C, &["  #pragma omp parallel for", " 1 #include <omp.h>", "    for (long q = 0;"]),
        (Tab::Cuda, &["__global__ void spmm", "atomicAdd"]),
        (
            Tab::Format,
            &["g* = √(S/n) = 2.63 (between 2 and 4)", "least at g = 4", "★ least F, ≈ g*", "1100 B", "16–31"],
        ),
        (Tab::Resources, &["sm_90", "255", "(170,1,1) × (64,8,1)"]),
    ];
    for (tab, needles) in expected {
        app.tab = tab;
        let screen = render(&mut app, 110, 40);
        for needle in needles {
            assert!(screen.contains(needle), "{tab:?} tab lacks {needle:?}:\n{screen}");
        }
        assert!(screen.contains("✓ 1.25 s · best 0.620 ms (c, g=2)"), "{screen}");
        assert!(screen.contains("C backend only: no GPU"), "{screen}");
        insta::assert_snapshot!(format!("tab_{}", tab.title().to_lowercase().replace(' ', "_")), screen);
    }
}

#[test]
fn error_output() {
    let error =
        "cell line 3: unknown tensor `Q`\n  C[m,n] += Q[m,k] * B[k,n]\n            ^ not bound in this cell";
    let mut app =
        with_output(CellOutput { error: Some(error.into()), seconds: 0.01, ..CellOutput::default() });
    app.tab = Tab::Einsum;
    let screen = render(&mut app, 100, 30);
    assert!(screen.contains("^ not bound in this cell"));
    assert!(screen.contains("✗ cell line 3: unknown tensor `Q`"));
    insta::assert_snapshot!("error", screen);
}

#[test]
fn help_screen_lists_every_key() {
    let mut app = notebook();
    keys(&mut app, "?");
    let screen = render(&mut app, 100, 40);
    for (_, keys, what) in super::help::KEYS {
        assert!(screen.contains(keys), "help lacks {keys}");
        assert!(screen.contains(what), "help lacks {what}");
    }
    insta::assert_snapshot!("help", screen);
}

#[test]
fn edit_mode() {
    let mut app = notebook();
    keys(&mut app, "j");
    app.on_key(key(KeyCode::Enter));
    app.on_key(key(KeyCode::Enter));
    keys(&mut app, "# more");
    assert_eq!(app.mode, Mode::Edit);
    let screen = render(&mut app, 100, 32);
    assert!(screen.contains(" EDIT  spmm.md [+]"));
    assert!(screen.contains("sweep g in [1, 2, 4, 8, 16]"));
    assert!(screen.contains("# more"));
    insta::assert_snapshot!("edit", screen);
}

#[test]
fn running_cell_shows_progress_and_dirty_flag() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    struct Wait(std::sync::Mutex<std::sync::mpsc::Receiver<()>>);
    impl super::worker::Runner for Wait {
        fn run(
            &self,
            _: &str,
            progress: &mut dyn FnMut(crate::notebook::output::Progress),
            cancel: &std::sync::atomic::AtomicBool,
        ) -> CellOutput {
            progress(crate::notebook::output::Progress {
                done: 3,
                total: 12,
                message: "g=8: compiling C".into(),
            });
            let rx = self.0.lock().unwrap();
            while !cancel.load(std::sync::atomic::Ordering::Relaxed) {
                if rx.recv_timeout(std::time::Duration::from_millis(5)).is_ok() {
                    break;
                }
            }
            output()
        }
    }
    let mut app = App::new(vec![Cell::spindle(CELL)], Some("x.md".into()), Arc::new(Wait(rx.into())));
    keys(&mut app, "b");
    keys(&mut app, "kr");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.running.as_ref().is_some_and(|r| r.progress.total == 0) && std::time::Instant::now() < deadline
    {
        app.tick();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let screen = render(&mut app, 100, 30);
    assert!(screen.contains("x.md [+]"), "{screen}");
    assert!(screen.contains("cell 1: 3/12 g=8: compiling C"), "{screen}");
    assert!(screen.contains("[*] spindle"), "{screen}");
    assert!(screen.contains("3/12 g=8: compiling C ·"), "the output pane shows progress:\n{screen}");
    app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
    drop(tx);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.is_busy() && std::time::Instant::now() < deadline {
        app.tick();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let screen = render(&mut app, 100, 30);
    assert!(screen.contains("[1] spindle"), "{screen}");
}

#[test]
fn small_terminals_do_not_panic() {
    let mut app = with_output(output());
    for tab in Tab::ALL {
        app.tab = tab;
        for (w, h) in [(1, 1), (10, 5), (40, 12), (80, 24)] {
            render(&mut app, w, h);
        }
    }
    keys(&mut app, "?");
    render(&mut app, 20, 6);
}
