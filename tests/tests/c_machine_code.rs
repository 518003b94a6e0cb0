//! The machine code gcc makes of printed C, where its choices decide the
//! speed: read with `objdump -d` from the compiled kernel (skipped with a
//! message where objdump is missing).

use std::process::Command;

use ndarray::ArrayD;
use spindle::ir::formats::DType;
use spindle::{CBackend, ElemType, Input, Problem, ProgramRun, TimingOptions};
use spindle_c::Compiler;
use spindle_tests::random_sparse;

/// The instructions of `source` compiled as the C backend compiles kernels
/// (and with line tables), each with the line of `source` it came from.
fn disassembly(source: &str) -> Option<Vec<(usize, String)>> {
    let flags = spindle_c::C_FLAGS.iter().copied().chain(["-g"]);
    let program = Compiler::from_env()
        .with_flags(flags)
        .compile(source, "spindle_kernel")
        .expect("the kernel compiles");
    let out = match Command::new("objdump").arg("-d").arg("-l").arg(program.so_path()).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => {
            eprintln!("skipped: objdump is not installed");
            return None;
        }
    };
    // `objdump -l` heads each run of instructions with `FILE.c:LINE`.
    let mut line = 0;
    let mut code = Vec::new();
    for text in out.lines() {
        match text.rsplit_once(".c:").and_then(|(_, n)| n.split_whitespace().next()?.parse().ok()) {
            Some(n) => line = n,
            None if text.starts_with(' ') && text.contains(':') => code.push((line, text.to_string())),
            None => {}
        }
    }
    Some(code)
}

/// The instructions compiled from the lines of `source` that contain
/// `needle` (line numbers count from 1).
fn on_lines<'c>(source: &str, code: &'c [(usize, String)], needle: &str) -> Vec<&'c String> {
    let lines: Vec<&str> = source.lines().collect();
    let holds =
        |line: usize| line.checked_sub(1).and_then(|i| lines.get(i)).is_some_and(|l| l.contains(needle));
    code.iter().filter(|(line, _)| holds(*line)).map(|(_, text)| text).collect()
}

/// Whether an instruction adds packed lanes: a packed add, or a packed
/// fused multiply-add (what gcc makes of a product summed, the C backend
/// compiling with `-ffp-contract=fast`), not a scalar one (`sd`, `ss`).
fn packed_add(instruction: &str) -> bool {
    instruction.split_whitespace().any(|w| w.contains("add") && (w.ends_with("pd") || w.ends_with("ps")))
}

/// A program run once under `schedule`, every statement checked against
/// the reference evaluator.
fn run_checked(problem: &Problem, schedule: &str) -> ProgramRun {
    let ran = problem
        .run_program(
            &CBackend::new(),
            &schedule.parse().unwrap(),
            TimingOptions { warmup: 0, repeats: 1 },
            true,
        )
        .unwrap();
    assert!(ran.checks.iter().all(|c| c.passed()), "{schedule}");
    ran
}

/// Seeded values of a dense operand in [0.25, 1.5).
fn values(shape: &[usize], seed: usize) -> Input {
    let data =
        (0..shape.iter().product()).map(|n: usize| 0.25 + ((n * 7 + seed) % 11) as f64 / 8.0).collect();
    Input::from(ArrayD::from_shape_vec(shape.to_vec(), data).unwrap())
}

/// GroupCOO SpMM summing a tile in registers (`reduce=accumulate`) reads
/// each gathered row of B in place. Its mask (the group exists) is tested
/// outside the loop over B's columns, the row read unmasked inside, and the
/// short loop over the group's entries unrolled late: left as it was, gcc
/// 12 peeled that loop early and read half of the copies' rows with
/// 8-lane gathers (3x slower on cora). Only the lines that read B count:
/// gcc may gather elsewhere (the stride-4 reads of a group's entries) on
/// other CPUs; where the CPU has no gathers at all there are none to find.
#[test]
fn tile_reductions_read_gathered_rows_contiguously() {
    for dtype in [DType::F32, DType::F64] {
        let b = ArrayD::from_shape_fn(vec![120, 64], |ix| 1.0 + (ix[0] * 64 + ix[1]) as f64 % 7.0);
        let problem = Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", random_sparse(&[90, 120], 0.05, 3))
            .format("A", "groupcoo:g=4")
            .tensor("B", Input::from(b))
            .dtype("B", ElemType::Value(dtype))
            .dtype("C", ElemType::Value(dtype));
        let prepared = problem.prepare().unwrap();
        let kernel =
            prepared.lower(&"reduce=accumulate tile.p=16 tile.n=16 threads=1".parse().unwrap()).unwrap();
        let source = spindle_c::print::print(&kernel, "spindle_kernel").unwrap();
        let reduce = source.split("#pragma GCC unroll 4").nth(1).unwrap_or_else(|| panic!("{source}"));
        let update = reduce.lines().find(|l| l.contains("acc[i_p][i_n] +=")).unwrap();
        assert!(update.contains("a_B[v") && !update.contains("select_"), "{dtype:?}: {update}\n{source}");
        if let Some(code) = disassembly(&source) {
            let reads_b = on_lines(&source, &code, "a_B[");
            assert!(!reads_b.is_empty(), "no line tables?");
            let gathers: Vec<&&String> = reads_b.iter().filter(|t| t.contains("gather")).collect();
            assert!(gathers.is_empty(), "{dtype:?}: {gathers:#?}\n{source}");
        }
    }
}

/// Dot products compile to packed adds (or fused multiply-adds) on the
/// line that sums: SDDMM's over k (D stored column-major, trie-fused:
/// summed in a register; over COO too) and a dense matrix-vector product over dense
/// levels (y's element summed in a register first). gcc reassociates a sum into lanes only under the loop's
/// `reduction` clause; without it the line is a chain of scalar adds.
#[test]
fn dot_products_sum_in_packed_lanes() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the packed-add mnemonics asserted are x86-64's");
        return;
    }
    let sddmm = Problem::new("A[i,j] = B[i,j] * (C[i,k] * D[k,j])")
        .tensor("B", random_sparse(&[30, 40], 0.1, 5))
        .format("B", "csr")
        .format("A", "csr")
        .tensor("C", values(&[30, 32], 1))
        .tensor("D", values(&[32, 40], 2))
        .format("D", "dd:modes=1-0");
    let matvec = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", values(&[24, 40], 3))
        .format("A", "dd")
        .tensor("x", values(&[40], 4));
    // Over COO (its column level a singleton, one position under each
    // row entry): printed as a loop of one trip, the dot product inside
    // stayed scalar (SDDMM into SpMM at 2.6x CSR's time).
    let coo_chain = Problem::new("S[i,j] = A[i,j] * X[i,k] * Y[j,k]; Z[i,n] = S[i,j] * X[j,n]")
        .tensor("A", random_sparse(&[30, 30], 0.1, 6))
        .format("A", "coo")
        .tensor("X", values(&[30, 32], 5))
        .tensor("Y", values(&[30, 32], 6));
    for (problem, schedule, sum) in [
        (sddmm, "fusion=trie threads=1", "l_T1 +="),
        (matvec, "fusion=none threads=1", "dot +="),
        (coo_chain, "fusion=trie threads=1", "l_T1 +="),
    ] {
        let ran = run_checked(&problem, schedule);
        let source = &ran.sources[0];
        let Some(code) = disassembly(source) else { return };
        let sums = on_lines(source, &code, sum);
        assert!(sums.iter().any(|t| packed_add(t)), "{sums:#?}\n{source}");
    }
}

/// A long contiguous dot product (GNN kernel 2's over k = 256, f64, trie-
/// and un-fused) sums its chunks' steps into several vector registers, so
/// that the (fused multiply-) adds form independent chains rather than one.
#[test]
fn long_dot_products_add_into_several_registers() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the packed-add mnemonics asserted are x86-64's");
        return;
    }
    let gnn2 = Problem::new("Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * V[h,j]")
        .tensor("A", random_sparse(&[20, 20], 0.2, 6))
        .format("A", "csr")
        .tensor("X", values(&[20, 256], 1))
        .tensor("Y", values(&[256, 20], 2))
        .format("Y", "dd:modes=1-0")
        .tensor("V", values(&[20, 8], 3));
    for schedule in ["fusion=trie threads=1", "fusion=none threads=1"] {
        let ran = run_checked(&gnn2, schedule);
        let source = &ran.sources[0];
        let Some(code) = disassembly(source) else { return };
        // AT&T syntax: the destination is the last operand.
        let mut targets: Vec<&str> = on_lines(source, &code, "part[ku] +=")
            .into_iter()
            .filter(|t| packed_add(t))
            .filter_map(|t| t.rsplit(',').next().map(str::trim))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        assert!(targets.len() >= 2, "{schedule}: {targets:?}\n{source}");
    }
}

/// The tile path's sum into one element over contiguous reads (a dot
/// product) runs as SIMD lanes; one masked lane by lane (a ragged last
/// tile) or whose reads gather (GroupCOO SpMV, x at the group's columns)
/// stays one chain.
#[test]
fn tile_dot_products_sum_in_packed_lanes() {
    let dot = |n: usize| {
        Problem::new("s[] = x[i] * y[i]").tensor("x", values(&[n], 1)).tensor("y", values(&[n], 2))
    };
    let gather = Problem::new("y[i] += A[i,j] * x[j]")
        .tensor("A", random_sparse(&[90, 120], 0.05, 3))
        .format("A", "groupcoo:g=4")
        .tensor("x", values(&[120], 4));
    let cases = [
        (dot(1024), "tile.i=16 threads=1", true),
        (dot(1024), "tile.i=16 reduce=atomic threads=1", true),
        (dot(1000), "tile.i=16 threads=1", false),
        (gather, "threads=1", false),
    ];
    for (problem, schedule, lanes) in cases {
        let prepared = problem.prepare().unwrap();
        let compiled = prepared.compile(&CBackend::new(), &schedule.parse().unwrap()).unwrap();
        let (_, check) = compiled.check().unwrap();
        assert!(check.passed(), "{schedule}: {:.2e}", check.max_rel_error);
        let source = compiled.source();
        assert_eq!(source.contains("reduction(+:dot)"), lanes, "{source}");
        if !lanes || !cfg!(target_arch = "x86_64") {
            continue;
        }
        let Some(code) = disassembly(source) else { return };
        let sums = on_lines(source, &code, "dot +=");
        assert!(sums.iter().any(|t| packed_add(t)), "{sums:#?}\n{source}");
    }
}
