//! Compound programs under every fusion policy (paper 003) on the C
//! backend: each policy's kernel runs on random non-zero data and is
//! compared with the reference evaluator's run of the program; the four
//! redundancies are read off the kernels' loop trees; what a program
//! kernel cannot do is refused with a reason.

use ndarray::ArrayD;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle::{CBackend, ElemType, Input, Problem, ProgramRun, Schedule, TimingOptions};
use spindle_formats::DType;
use spindle_tests::random_sparse;

fn dense(shape: &[usize], seed: u64) -> Input {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sign = |rng: &mut ChaCha8Rng| if rng.random::<bool>() { 1.0 } else { -1.0 };
    Input::from(ArrayD::from_shape_fn(shape.to_vec(), |_| sign(&mut rng) * rng.random_range(0.5..1.5)))
}

/// `statement` with dense operands `dense`, sparse ones `sparse` (shape,
/// density, format) and the extra `formats` (outputs).
fn problem(
    statement: &str,
    dense_operands: &[(&str, &[usize])],
    sparse: &[(&str, &[usize], f64, &str)],
    formats: &[(&str, &str)],
) -> Problem {
    let mut p = Problem::new(statement);
    for (seed, (name, shape)) in dense_operands.iter().enumerate() {
        p = p.tensor(*name, dense(shape, 10 + seed as u64));
    }
    for (seed, (name, shape, density, format)) in sparse.iter().enumerate() {
        p = p.tensor(*name, random_sparse(shape, *density, 40 + seed as u64)).format(*name, *format);
    }
    for (name, format) in formats {
        p = p.format(*name, *format);
    }
    p
}

fn run(p: &Problem, fusion: &str) -> ProgramRun {
    let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
    p.run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true)
        .unwrap_or_else(|e| panic!("fusion={fusion}: {e}"))
}

fn sddmm(formats: &[(&str, &str)]) -> Problem {
    problem(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("C", &[20, 6]), ("D", &[6, 24])],
        &[("B", &[20, 24], 0.2, "csr")],
        formats,
    )
}

/// SDDMM with D stored column-major, so the sum over k reads C's row and
/// D's column contiguously; NK = 11 leaves a ragged end to SIMD lanes.
fn sddmm_column_major(formats: &[(&str, &str)]) -> Problem {
    let formats: Vec<(&str, &str)> =
        [("D", "dd:modes=1-0")].into_iter().chain(formats.iter().copied()).collect();
    sddmm_nk(11, &formats)
}

fn sddmm_nk(nk: usize, formats: &[(&str, &str)]) -> Problem {
    problem(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("C", &[20, nk]), ("D", &[nk, 24])],
        &[("B", &[20, 24], 0.2, "csr")],
        formats,
    )
}

fn gnn1() -> Problem {
    problem(
        "Z[i,j] = A[i,k] * X[k,h] * W[h,j]",
        &[("X", &[20, 8]), ("W", &[8, 5])],
        &[("A", &[20, 20], 0.15, "csr")],
        &[],
    )
}

fn listing3() -> Problem {
    problem(
        "A[i,j] = (B[i,j] + E[i,j]) * (C[i,k] * D[k,j])",
        &[("B", &[6, 7]), ("E", &[6, 7]), ("D", &[5, 7])],
        &[("C", &[6, 5], 0.4, "csr")],
        &[],
    )
}

#[test]
fn every_policy_matches_the_reference() {
    let cases = [
        ("SDDMM, dense output", sddmm(&[])),
        ("SDDMM, output in B's pattern", sddmm(&[("A", "csr")])),
        ("SDDMM, D column-major", sddmm_column_major(&[])),
        ("SDDMM, D column-major, output in B's pattern", sddmm_column_major(&[("A", "csr")])),
        ("SDDMM, NK = 37, output in B's pattern", sddmm_nk(37, &[("A", "csr")])),
        ("GNN kernel 1", gnn1()),
        (
            "GNN kernel 2",
            problem(
                "Z[i,j] = (A[i,h] * (X[i,k] * Y[k,h])) * Y[h,j]",
                &[("X", &[12, 10]), ("Y", &[10, 10])],
                &[("A", &[12, 10], 0.25, "csr")],
                &[],
            ),
        ),
        (
            "MTTKRP",
            problem(
                "A[i,r] = X[i,j,k] * C[k,r] * B[j,r]",
                &[("C", &[10, 4]), ("B", &[9, 4])],
                &[("X", &[8, 9, 10], 0.1, "csf")],
                &[],
            ),
        ),
        // Written with the j sum first, the product is reordered to sum k
        // first (reorder_products).
        (
            "MTTKRP, written with the j sum first",
            problem(
                "A[i,r] = X[i,j,k] * B[j,r] * C[k,r]",
                &[("C", &[10, 4]), ("B", &[9, 4])],
                &[("X", &[8, 9, 10], 0.1, "csf")],
                &[],
            ),
        ),
        // Two statements are not reordered: the first sum leaves T1[i,k]
        // in X's pattern summed over j, which CSF reaches only through j,
        // so its loop runs densely over T1.
        (
            "MTTKRP in two statements, the j sum first",
            problem(
                "T1[i,k,r] = X[i,j,k] * B[j,r]; A[i,r] = T1[i,k,r] * C[k,r]",
                &[("C", &[10, 4]), ("B", &[9, 4])],
                &[("X", &[8, 9, 10], 0.1, "csf")],
                &[],
            ),
        ),
        // CDC: the temporary's middle level is dense, located only from
        // T's own access (refused under fusion=none, naming T1).
        (
            "MTTKRP over CDC",
            problem(
                "A[i,r] = X[i,j,k] * C[k,r] * B[j,r]",
                &[("C", &[10, 4]), ("B", &[9, 4])],
                &[("X", &[8, 9, 10], 0.1, "cdc")],
                &[],
            ),
        ),
        (
            "tensor times two vectors",
            problem(
                "y[i] = X[i,j,k] * u[j] * v[k]",
                &[("u", &[9]), ("v", &[10])],
                &[("X", &[8, 9, 10], 0.1, "csf")],
                &[],
            ),
        ),
        (
            "two statements",
            problem(
                "H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]",
                &[("X", &[20, 8]), ("W", &[8, 5])],
                &[("A", &[20, 20], 0.15, "csr")],
                &[],
            ),
        ),
        ("Listing 3 (dense)", listing3()),
        // The producer sums over x, which the consumer iterates: fusing x
        // would read T before its sum completes.
        (
            "a sum the consumer iterates",
            problem(
                "T[i] = A[i,x] * B[x]; C[i,x] = T[i] * D[i,x]",
                &[("A", &[5, 6]), ("B", &[6]), ("D", &[5, 6])],
                &[],
                &[],
            ),
        ),
        // The terms share A, so the sum walks A's coordinates, and so does
        // its reader.
        (
            "a sum whose terms share a mask",
            problem(
                "T[i,j] = A[i,j] * D[i,j] + A[i,j] * E[i,j]; y[i] = T[i,j] * x[j]",
                &[("D", &[12, 10]), ("E", &[12, 10]), ("x", &[10])],
                &[("A", &[12, 10], 0.25, "csr")],
                &[],
            ),
        ),
        (
            "a sum whose terms share a mask, into its pattern",
            problem(
                "S[i,j] = A[i,j] * D[i,j] - A[i,j]",
                &[("D", &[12, 10])],
                &[("A", &[12, 10], 0.25, "csr")],
                &[("S", "csr")],
            ),
        ),
    ];
    for (what, p) in &cases {
        // One thread, and two: a trie-fused kernel whose rows write apart
        // runs its outer loop on threads, each with its own temporaries.
        for fusion in ["none", "maximal", "trie", "none threads=2", "trie threads=2"] {
            let ran = run(p, fusion);
            assert_eq!(ran.checks.len(), 1, "{what}, fusion={fusion}");
            assert!(
                ran.checks[0].passed(),
                "{what}, fusion={fusion}: max relative error {:.2e}\n{}",
                ran.checks[0].max_rel_error,
                ran.kernels.join("\n")
            );
        }
    }
}

/// The loops (and merges) around the first line of `kernel` containing
/// `needle`, innermost first.
fn enclosing(kernel: &str, needle: &str) -> Vec<String> {
    let lines: Vec<&str> = kernel.lines().collect();
    let at =
        lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in\n{kernel}"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut depth = indent(lines[at]);
    let mut out = Vec::new();
    for l in lines[..at].iter().rev() {
        if indent(l) < depth && !l.trim().is_empty() {
            depth = indent(l);
            let t = l.trim();
            if t.starts_with("for ") || t.starts_with("merge ") {
                out.push(t.to_string());
            }
        }
    }
    out
}

fn under(kernel: &str, needle: &str, index: &str) -> bool {
    let prefix = [format!("for {index} "), format!("merge {index} ")];
    enclosing(kernel, needle).iter().any(|l| prefix.iter().any(|p| l.starts_with(p.as_str())))
}

/// Reduction redundancy: maximal fusion multiplies by B inside the sum over
/// k; trie fusion completes the sum first and multiplies once.
#[test]
fn trie_fusion_removes_reduction_redundancy() {
    let p = sddmm(&[("A", "csr")]);
    let maximal = &run(&p, "maximal").kernels[0];
    assert!(under(maximal, "B_val[pB1] *", "k"), "{maximal}");
    let trie = &run(&p, "trie").kernels[0];
    assert!(under(trie, "T1 += (C[i,k] * D[k,j])", "k"), "{trie}");
    assert!(!under(trie, "(B_val[pB1] * T1)", "k"), "{trie}");
}

/// Loop-invariant redundancy (the paper's Listing 3): `B + E` depends on
/// neither k; maximal fusion adds it for every k, trie fusion once per
/// (i, j).
#[test]
fn trie_fusion_removes_loop_invariant_redundancy() {
    let p = listing3();
    let maximal = &run(&p, "maximal").kernels[0];
    assert!(under(maximal, "(B[i,j] + E[i,j])", "k"), "{maximal}");
    let trie = &run(&p, "trie").kernels[0];
    assert!(!under(trie, "(B[i,j] + E[i,j])", "k"), "{trie}");
    // GNN kernel 1: both redundancies at once make maximal fusion walk W
    // for every stored entry of A (asymptotically slower); trie fusion
    // reads W once per row.
    let p = gnn1();
    let maximal = &run(&p, "maximal").kernels[0];
    assert!(under(maximal, "W[h,j]", "k"), "{maximal}");
    let trie = &run(&p, "trie").kernels[0];
    assert!(!under(trie, "W[h,j]", "k"), "{trie}");
    assert!(trie.contains("local T1[8]"), "T1 is one row of h: {trie}");
    // Rows write apart: the row loop runs on threads, each with its row.
    assert!(trie.contains("parallel outermost loop"), "{trie}");
    // (One thread runs a serial copy first, with T1 its own.)
    let source = &run(&p, "trie threads=2").sources[0];
    let region = source.find("#pragma omp parallel").expect("a parallel region");
    let threaded = &source[region..];
    let local = threaded.find("l_T1[8] = {0};").expect("T1 on the thread's stack in the region");
    assert!(threaded[local..].contains("#pragma omp for"), "{source}");
    assert!(source[..region].contains("if (nthreads <= 1)"), "{source}");
}

/// GNN kernel 1 whose consumer reads a W about an L1's size: each fused
/// row's gathers of X evict part of W before the next row reads it all
/// again. In strips, the producer fills a strip's rows, and the consumer
/// reads W once for all of them into a block of the output's rows; unfused,
/// the product by W runs in strips of T1's rows alike.
#[test]
fn strips_read_the_consumers_operands_once_per_strip() {
    // 23 rows: a ragged last strip for every size tried.
    let gnn1 = |nh: usize, nj: usize| {
        problem(
            "Z[i,j] = A[i,k] * X[k,h] * W[h,j]",
            &[("X", &[23, nh]), ("W", &[nh, nj])],
            &[("A", &[23, 23], 0.15, "csr")],
            &[],
        )
    };
    let p = gnn1(8, 5);
    for (fusion, strip) in ["trie", "none"].into_iter().flat_map(|f| [2, 3, 4, 64].map(|s| (f, s))) {
        for threads in [1, 2] {
            let ran = run(&p, &format!("{fusion} strip={strip} threads={threads}"));
            let kernel = &ran.kernels[0];
            assert!(ran.checks[0].passed(), "strip={strip}: {:.2e}\n{kernel}", ran.checks[0].max_rel_error);
            assert!(kernel.contains(&format!("for i_strip in 0..23 by strips of {strip}")), "{kernel}");
            let around_w = enclosing(kernel, "W[h,j]");
            assert_eq!(around_w[1], format!("for i_row in 0..{strip} (the whole strip)"), "{kernel}");
            assert!(around_w[2].starts_with("for h ") && !under(kernel, "W[h,j]", "k"), "{kernel}");
            assert!(
                ran.notes.iter().any(|n| n.contains(&format!("in strips of {strip}"))),
                "{:?}",
                ran.notes
            );
        }
    }
    let alone = run(&p, "trie strip=1");
    assert!(!alone.kernels[0].contains("strips") && alone.notes.is_empty(), "{}", alone.kernels[0]);
    // strip=auto: a W of 320 bytes stays cached between rows; one of 32 KB
    // (64 x 64, f64) goes in strips of 2, a block of 2 x 64 accumulators.
    let small = run(&p, "trie");
    assert!(!small.kernels[0].contains("strips"), "{}", small.kernels[0]);
    // Unfused, nothing evicts W between rows: strips from 64 KB.
    for (fusion, nh, strips) in [("trie", 64, true), ("none", 64, false), ("none", 128, true)] {
        let big = run(&gnn1(nh, 64), fusion);
        assert!(big.checks[0].passed(), "{fusion}: {:.2e}", big.checks[0].max_rel_error);
        assert_eq!(big.kernels[0].contains("by strips of 2"), strips, "{fusion}: {}", big.kernels[0]);
        let note = format!("its {} KB of loop-invariant operands", nh / 2);
        assert_eq!(big.notes.iter().any(|n| n.contains(&note)), strips, "{fusion}: {:?}", big.notes);
    }
    // A kernel without such a consumer says so and runs its rows alone.
    let sddmm = run(&sddmm(&[]), "trie strip=4");
    assert!(!sddmm.kernels[0].contains("strips") && sddmm.checks[0].passed(), "{}", sddmm.kernels[0]);
    assert!(
        sddmm.notes.iter().any(|n| n.contains("no row loop ends in a dense consumer")),
        "{:?}",
        sddmm.notes
    );
}

/// The program's reference walks the statements one by one where that
/// visits fewer points than the substituted statement (GNN kernel 1:
/// `nnz · NH + NI · NH · NJ` against `nnz · NH · NJ`), and gives the
/// substituted statement's values: with `=`, and with `+=` into an output
/// given data, which both start from.
#[test]
fn the_program_reference_takes_the_shorter_walk_to_the_same_values() {
    let shapes: [(&str, &[usize]); 2] = [("X", &[23, 16]), ("W", &[16, 12])];
    let sparse: [(&str, &[usize], f64, &str); 1] = [("A", &[23, 23], 0.2, "csr")];
    for statement in ["Z[i,j] = A[i,k] * X[k,h] * W[h,j]", "Z[i,j] += A[i,k] * X[k,h] * W[h,j]"] {
        let mut p = problem(statement, &shapes, &sparse, &[]);
        if statement.contains("+=") {
            p = p.tensor("Z", dense(&[23, 12], 7));
        }
        let one_by_one = p.program_reference().unwrap();
        let substituted = p.prepare().unwrap().reference().unwrap();
        let scale = substituted.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let error =
            one_by_one.iter().zip(&substituted).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale;
        assert_eq!(one_by_one.shape(), substituted.shape());
        assert!(error < 1e-12, "{statement}: {error:.2e}");
        assert!(substituted.iter().all(|v| v.is_finite()) && substituted.iter().any(|&v| v != 0.0));
    }
}

/// A loop over stored entries whose lanes would gather a dense operand at
/// the entries' coordinates (D at j) is kept scalar (GCC vectorises it with
/// gathers, slower here than scalar loads); one reading only at the
/// entries' positions (B and T1 at pB1) is left to the compiler.
#[test]
fn entry_loops_that_would_gather_stay_scalar() {
    let p = sddmm(&[]);
    let source = &run(&p, "none").sources[0];
    let loops: Vec<&str> = source.split("for (int64_t p_B1 =").skip(1).collect();
    assert_eq!(loops.len(), 2, "{source}");
    let scalar = |body: &str| body.lines().nth(2).is_some_and(|l| l.contains("__asm__ volatile(\"\");"));
    assert!(loops[0].contains("t_D[") && scalar(loops[0]), "{source}");
    assert!(!loops[1].contains("t_D[") && !scalar(loops[1]), "{source}");
}

/// A dense loop that only sums into one element (SDDMM's dot product over
/// k: into the entry being assembled under maximal fusion, into T1's
/// register under trie, into T1's element unfused) runs as SIMD lanes with
/// partial sums where its reads are contiguous (D column-major), and stays
/// one chain where lanes would gather (D row-major), unless the sum is long.
#[test]
fn dot_products_over_contiguous_reads_sum_in_simd_lanes() {
    for (fusion, sum) in [("maximal", "acc +="), ("trie", "l_T1 +="), ("none", "dot +=")] {
        let source = &run(&sddmm_column_major(&[("A", "csr")]), fusion).sources[0];
        let summing = source.lines().filter(|l| l.trim_start().starts_with(sum)).count();
        let reductions = source.split("#pragma omp simd reduction(").skip(1);
        // The sums in the body of a loop marked with a reduction.
        let in_body = |after: &str| {
            let body = after.lines().skip(2).take_while(|l| !l.trim_start().starts_with('}'));
            body.filter(|l| l.trim_start().starts_with(sum)).count()
        };
        let simd_sums: usize = reductions.map(in_body).sum();
        assert!(summing > 0 && simd_sums == summing, "fusion={fusion}: {source}");
        let row_major = &run(&sddmm(&[("A", "csr")]), fusion).sources[0];
        assert!(!row_major.contains("reduction(+:"), "fusion={fusion}: {row_major}");
        let long = &run(&sddmm_nk(37, &[("A", "csr")]), fusion).sources[0];
        assert!(long.contains("reduction(+:"), "fusion={fusion}: {long}");
    }
}

/// A contiguous dot product of 32 f64 steps or more sums in chunks of 32,
/// step `ku` of every chunk into its own partial sum `part[ku]`, then the
/// partial sums into where it summed before (the assembled entry's `acc`
/// under maximal, the register under trie, `dot` unfused); a ragged end
/// runs after the chunks as before, and a shorter sum as one SIMD sum. Every
/// policy at every length agrees with the reference evaluator.
#[test]
fn long_dot_products_sum_in_chunks_of_partial_sums() {
    for nk in [31, 64, 75] {
        for (fusion, sum) in [("maximal", "acc"), ("trie", "l_T1"), ("none", "dot")] {
            let ran = run(&sddmm_nk(nk, &[("D", "dd:modes=1-0"), ("A", "csr")]), fusion);
            assert!(ran.checks.iter().all(|c| c.passed()), "NK {nk}, fusion={fusion}");
            let source = &ran.sources[0];
            let chunked = source.contains("part[ku] += ");
            assert_eq!(chunked, nk >= 32, "NK {nk}, fusion={fusion}: {source}");
            assert_eq!(source.contains(&format!("{sum} += part[ku];")), chunked, "{source}");
            let main = nk - nk % 32;
            assert_eq!(source.contains(&format!("kc < {main}; kc += 32")), chunked, "{source}");
            if chunked {
                let ragged_end = format!("i_k = {main}; i_k < {nk};");
                assert_eq!(source.contains(&ragged_end), main < nk, "{source}");
            }
        }
    }
}

/// GNN kernel 1 fused maximally sums over h inside a loop over j, reading
/// `W[h,j]` down its columns: gathering them in lanes ran 6x slower than
/// the chains gcc runs in lanes over j, which it does while Z holds the
/// computation's type (f64 here). An f32 Z summed in f64 stays scalar
/// there, so the gathers win and the sum keeps its lanes.
#[test]
fn strided_sums_leave_the_lanes_to_the_loop_around_them() {
    let gnn1 = |a: Input| {
        Problem::new("Z[i,j] = A[i,k] * X[k,h] * W[h,j]")
            .tensor("A", a)
            .format("A", "csr")
            .tensor("X", dense(&[20, 40], 10))
            .tensor("W", dense(&[40, 5], 11))
    };
    let a = random_sparse(&[20, 20], 0.15, 40);
    let f64_z = run(&gnn1(Input::from(a.clone())), "maximal");
    assert!(f64_z.checks[0].passed());
    assert!(!f64_z.sources[0].contains("reduction(+:dot)"), "{}", f64_z.sources[0]);
    // Z declared f32 (undeclared, it takes its operands' promoted dtype,
    // f64 here).
    let f32_z = gnn1(Input::from(a.cast::<f32, i64>().unwrap()))
        .tensor("Z", Input::shape(&[20, 5], ElemType::Value(DType::F32)));
    let f32_z = run(&f32_z, "maximal");
    assert!(f32_z.checks[0].passed());
    assert!(f32_z.sources[0].contains("float *restrict t_Z"), "{}", f32_z.sources[0]);
    assert!(f32_z.sources[0].contains("reduction(+:dot)"), "{}", f32_z.sources[0]);
}

/// Dead-value redundancy: the product C·D is computed only where B has an
/// entry, even unfused; the temporary holds one value per entry of B.
#[test]
fn propagation_removes_dead_values() {
    let p = sddmm(&[]);
    let nnz = random_sparse(&[20, 24], 0.2, 40).nnz();
    let none = &run(&p, "none").kernels[0];
    assert!(none.contains(&format!("local T1[{nnz}]")), "{none}");
    let walks = enclosing(none, "T1[pB1] += (C[i,k] * D[k,j])");
    assert!(walks.iter().any(|l| l.starts_with("merge j over pB1 = B")), "{none}");
}

/// Dead values of a sum: `A*D + A*E` is zero where A is, so its loop walks
/// A's coordinates, the temporary holds one value per entry of A, and its
/// reader walks them too (the sum was evaluated at every coordinate, and
/// its reader's loop with it).
#[test]
fn a_sum_whose_terms_share_a_mask_walks_it_and_so_does_its_reader() {
    let p = problem(
        "T[i,j] = A[i,j] * D[i,j] + A[i,j] * E[i,j]; y[i] = T[i,j] * x[j]",
        &[("D", &[20, 24]), ("E", &[20, 24]), ("x", &[24])],
        &[("A", &[20, 24], 0.2, "csr")],
        &[],
    );
    let nnz = random_sparse(&[20, 24], 0.2, 40).nnz();
    let none = &run(&p, "none").kernels[0];
    assert!(none.contains(&format!("local T[{nnz}]")), "{none}");
    for needle in ["T[pA1] += ((A_val[pA1] * D[i,j])", "y[i] += (T[pA1] * x[j])"] {
        let walks = enclosing(none, needle);
        assert!(walks.iter().any(|l| l.starts_with("merge j over pA1 = A")), "{needle}: {none}");
    }
}

/// Load-store redundancy: unfused, the temporary goes to memory and back;
/// trie fusion reduces it to a scalar that stays in a register.
#[test]
fn dimension_reduction_removes_load_store_redundancy() {
    let p = sddmm(&[("A", "csr")]);
    assert!(!run(&p, "none").kernels[0].contains("(a scalar)"));
    let trie = &run(&p, "trie").kernels[0];
    assert!(trie.contains("local T1 (a scalar)"), "{trie}");
    assert!(trie.contains("clear T1"), "{trie}");
}

/// A product whose written order sums a level of its stored operand before
/// a deeper one is split from the innermost level out, and the run says
/// so: MTTKRP written `X * B * C` over CSF made `T1[i,k,r]`, a temporary
/// over all of k per row (on FROSTT's med.tns, 2425 x 29567 x 16 elements,
/// refused), where `X * C * B` keeps one row of r per fiber under trie
/// fusion.
#[test]
fn products_are_split_from_the_stored_operands_innermost_level_out() {
    let mttkrp = |statement| {
        problem(statement, &[("C", &[10, 4]), ("B", &[9, 4])], &[("X", &[8, 9, 10], 0.1, "csf")], &[])
    };
    let ran = run(&mttkrp("A[i,r] = X[i,j,k] * B[j,r] * C[k,r]"), "trie");
    assert_eq!(ran.statements, ["T1[i,j,r] = X[i,j,k] * C[k,r]", "A[i,r] = T1[i,j,r] * B[j,r]"]);
    assert!(
        ran.notes[0].starts_with("the product is split as `X[i,j,k] * C[k,r] * B[j,r]`"),
        "{:?}",
        ran.notes
    );
    let kernel = &ran.kernels[0];
    assert!(kernel.contains("local T1[4]"), "one row of r per fiber:\n{kernel}");
    // Fused maximally, the row of A that the j and k loops sum into stays
    // in a local array (registers) across both loops, added to A once.
    let maximal = run(&mttkrp("A[i,r] = X[i,j,k] * B[j,r] * C[k,r]"), "maximal");
    let source = &maximal.sources[0];
    assert!(source.contains("o_row[4] = {0};") && source.contains("+= o_row[i_r];"), "{source}");
    // Written in that order, or with no deeper level left free, the
    // product stays as written.
    for statement in ["A[i,r] = X[i,j,k] * C[k,r] * B[j,r]", "y[i] = X[i,j,k] * v[k] * u[j]"] {
        let p = problem(
            statement,
            &[("C", &[10, 4]), ("B", &[9, 4]), ("u", &[9]), ("v", &[10])],
            &[("X", &[8, 9, 10], 0.1, "csf")],
            &[],
        );
        assert!(run(&p, "trie").notes.iter().all(|n| !n.contains("split as")), "{statement}");
    }
    for p in [gnn1(), sddmm(&[])] {
        assert!(run(&p, "trie").notes.iter().all(|n| !n.contains("split as")));
    }
}

/// Over COO and GroupCOO a row's entries lie in several iterations of the
/// loop over rows. Three faults came of treating that loop as one row per
/// iteration: a temporary kept per position (a sum per entry, not per row),
/// another statement's loop walking the repeated rows (a row counted once
/// per entry), statements fused into one iteration that reads a row's sum
/// before it is complete, and that loop run on threads (two threads adding
/// into one row of C: wrong in 3 of 10 runs on cora).
#[test]
fn programs_over_levels_whose_rows_repeat() {
    let cases = [
        ("y[i] = A[i,j] * x[j]; z[j] = A[i,j] * y[i]", vec![("x", &[30][..])]),
        ("y[i] = A[i,j] * x[j]; s[] = y[i] * y[i]", vec![("x", &[30][..])]),
        (
            "C[i,j] = A[i,k] * B[k,j]; C[i,j] += A[i,k] * D[k,j]",
            vec![("B", &[30, 6][..]), ("D", &[30, 6][..])],
        ),
        // A read again by the consumer (refused: propagation made S1 walk
        // A's rows by S2's j).
        ("y[i] = A[i,j] * x[j]; z[i] = A[i,j] * y[j]", vec![("x", &[30][..])]),
    ];
    for (statement, dense_operands) in &cases {
        for format in ["coo", "groupcoo:dim=0,g=2", "csr"] {
            // Square, so that A multiplies y in the last case.
            let p = problem(statement, dense_operands, &[("A", &[30, 30], 0.2, format)], &[]);
            for fusion in ["none", "trie", "none threads=2", "trie threads=2"] {
                let ran = run(&p, fusion);
                assert!(
                    ran.checks[0].passed(),
                    "{statement} over {format}, fusion={fusion}: max relative error {:.2e}\n{}",
                    ran.checks[0].max_rel_error,
                    ran.kernels.join("\n")
                );
                if format != "csr" {
                    assert!(!ran.sources[0].contains("omp parallel"), "{statement} over {format}, {fusion}");
                }
            }
        }
    }
}

/// Two sparse operands in one loop need co-iteration, which program
/// kernels do not do: under `fusion=none` each statement runs as its own
/// kernel (whose level path co-iterates), saying why; maximal fusion takes
/// it, and so does trie, the default, saying why.
#[test]
fn co_iteration_runs_apart_or_fused_maximally() {
    let p = problem(
        "A[i,j] = B[i,j] * E[i,j] * (C[i,k] * D[k,j])",
        &[("C", &[6, 3]), ("D", &[3, 7])],
        &[("B", &[6, 7], 0.3, "csr"), ("E", &[6, 7], 0.3, "csr")],
        &[],
    );
    let none = run(&p, "none");
    assert!(none.checks[0].passed(), "{:?}", none.checks);
    assert!(
        none.notes.iter().any(|n| n.contains("one sparse operand per loop") && n.contains("its own kernel")),
        "{:?}",
        none.notes
    );
    assert!(run(&p, "maximal").checks[0].passed());
    let trie = run(&p, "trie");
    assert!(
        trie.checks[0].passed() && trie.notes.iter().any(|n| n.contains("fused maximally")),
        "{:?}",
        trie.notes
    );
    // A sparse output takes the pattern of a masking operand, or the
    // program kernel is refused; trie then fuses maximally, gathering it
    // in a workspace, and none runs the statements apart.
    let p = gnn1().format("Z", "csr");
    let none = run(&p, "none");
    assert!(none.checks[0].passed(), "{:?}", none.checks);
    assert!(
        none.notes.iter().any(|n| n.contains("takes the pattern") && n.contains("its own kernel")),
        "{:?}",
        none.notes
    );
    let trie = run(&p, "trie");
    assert!(trie.checks[0].passed(), "{:?}", trie.checks);
    assert!(
        trie.notes.iter().any(|n| n.contains("takes the pattern") && n.contains("fused maximally")),
        "{:?}",
        trie.notes
    );
    // A mask in the output's format whose rows repeat (COO) holds it too:
    // each position of its last level is one element (stored data are
    // canonical), so the program kernel stores there (it was refused and
    // fused maximally).
    let coo = problem(
        "A[i,j] = B[i,j] * (C[i,k] * D[k,j])",
        &[("C", &[20, 6]), ("D", &[6, 24])],
        &[("B", &[20, 24], 0.2, "coo")],
        &[("A", "coo")],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&coo, fusion);
        assert!(ran.checks[0].passed(), "{fusion}: {:?}", ran.checks);
        assert!(!ran.notes.iter().any(|n| n.contains("takes the pattern")), "{fusion}: {:?}", ran.notes);
        assert!(ran.kernels[0].contains("A[pB1] +="), "{fusion}: {}", ran.kernels[0]);
    }
}

/// SDDMM over COO: A's rows repeat, but a position of its last level
/// (unique) is one element, so its mask propagates into the producer when
/// the producer keeps every level's index, and the nests fuse where each
/// dependence stays at one element. The temporary was dense (23133² x 16
/// products on ca-CondMat), so trie fused maximally, and that one
/// statement gathered its COO output in a dense workspace of every
/// coordinate: 91 ms against CSR's 0.5 ms. Now one fused nest over A's
/// entries, on C and on the emulated GPU; maximal fusion appends the COO
/// output in A's order, with no workspace.
#[test]
fn sddmm_over_coo_walks_the_mask_whole() {
    let coo = problem(
        "S[i,j] = A[i,j] * (U[i,k] * V[j,k])",
        &[("U", &[20, 6]), ("V", &[24, 6])],
        &[("A", &[20, 24], 0.2, "coo")],
        &[("S", "coo")],
    );
    let fused = "for i in A\n  for j in A\n    for k\n      S1: T1[i,j] = U[i,k] * V[j,k]\n    S2:";
    for fusion in ["trie", "none", "maximal"] {
        let ran = run(&coo, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()), "{fusion}: {:?}", ran.checks);
        assert!(!ran.notes.iter().any(|n| n.contains("fused maximally")), "{fusion}: {:?}", ran.notes);
        match fusion {
            "trie" => assert!(ran.forest.contains(fused), "{}", ran.forest),
            "none" => assert!(ran.forest.contains("for i in A\n  for j in A\n    for k\n"), "{}", ran.forest),
            _ => assert!(ran.kernels[0].contains("workspace: none"), "{}", ran.kernels[0]),
        }
    }
    let schedule = Schedule::default();
    let emulate = spindle::EmulateBackend::from_env();
    let ran = coo.run_program(&emulate, &schedule, TimingOptions { warmup: 0, repeats: 1 }, true).unwrap();
    assert!(
        ran.checks.iter().all(|c| c.passed()) && ran.forest.contains(fused),
        "{:?}\n{}",
        ran.checks,
        ran.forest
    );
    // A reader at another coordinate of the temporary (`T1[j,i]`) is not
    // at one element: the nests stay apart (a fused walk would read a
    // value not yet computed).
    let apart = problem(
        "T[i,j] = U[i,k] * V[j,k]; S[i,j] = A[i,j] * T[j,i]",
        &[("U", &[20, 6]), ("V", &[20, 6])],
        &[("A", &[20, 20], 0.2, "coo")],
        &[],
    );
    let ran = run(&apart, "trie");
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}\n{}", ran.checks, ran.forest);
    assert!(!ran.forest.contains(fused), "{}", ran.forest);
}

/// A sparse output too big to compare dense (5000² elements, past the 2^24
/// a dense reference holds) is checked entry by entry where an operand
/// masks it: the reference evaluates the statement at the mask's entries
/// alone (the check was refused: SDDMM on ca-CondMat could not be checked).
/// A wrong entry still fails it.
#[test]
fn a_masked_sparse_output_too_big_for_a_dense_reference_is_checked_by_its_entries() {
    let a = spindle_formats::generate::uniform::<f64, i64>(5000, 5000, 20_000, 3).unwrap();
    for format in ["csr", "coo"] {
        let p = Problem::new("S[i,j] = A[i,j] * (U[i,k] * V[j,k])")
            .tensor("A", a.clone())
            .tensor("U", dense(&[5000, 4], 1))
            .tensor("V", dense(&[5000, 4], 2))
            .format("A", format)
            .format("S", format);
        let ran = run(&p, "trie");
        assert_eq!(ran.checks.len(), 1, "{format}");
        assert!(ran.checks[0].passed(), "{format}: {:?}", ran.checks);
        assert_eq!(ran.checks[0].stored, Some(a.nnz()), "{format}");
        // The comparison itself: an entry off, or one missing, fails.
        let want = ran.assembled.as_ref().map(|s| s.to_coo().unwrap()).unwrap();
        assert_eq!(spindle::check::max_rel_error_union(&want, &want), 0.0);
        let mut off = want.clone();
        off.val[7] += 1.0;
        assert!(spindle::check::max_rel_error_union(&off, &want) > 1e-3);
        let short = spindle_formats::Coo::new(
            want.shape.clone(),
            want.crd.iter().map(|c| c[1..].to_vec()).collect(),
            want.val[1..].to_vec(),
        )
        .unwrap();
        assert!(spindle::check::max_rel_error_union(&short, &want) > 1e-3);
    }
}

/// Over COO and GroupCOO a program kernel that adds into its rows (SDDMM
/// into SpMM) runs on threads in whole runs of a row's positions (Sgap's
/// segment ownership on the CPU): each thread's share of the positions
/// moves its ends past the row they fall in, so no two threads add into
/// one row (it ran on one thread: ca-CondMat over COO 4.6 ms, 2.2 ms on
/// two). Checked against the reference on rows that straddle the shares.
#[test]
fn programs_over_repeated_rows_run_on_threads_in_runs_of_a_row() {
    let a = spindle_formats::generate::uniform::<f64, i64>(600, 600, 6000, 9).unwrap();
    for format in ["coo", "groupcoo:dim=0,g=4"] {
        let p = Problem::new("S[i,j] = A[i,j] * X[i,k] * Y[j,k]; Z[i,n] = S[i,j] * X[j,n]")
            .tensor("A", a.clone())
            // (X and Y hold 2^18 values: enough work to wake threads.)
            .tensor("X", dense(&[600, 220], 1))
            .tensor("Y", dense(&[600, 220], 2))
            .format("A", format);
        let threads = 3;
        let ran = run(&p, &format!("trie threads={threads}"));
        assert!(ran.checks[0].passed(), "{format}, {threads} threads: {:?}", ran.checks);
        assert!(
            ran.kernels[0].contains("outermost loop on threads in whole runs of a row"),
            "{}",
            ran.kernels[0]
        );
        assert!(
            ran.sources[0].contains("omp parallel") && ran.sources[0].contains("r_lo"),
            "{}",
            ran.sources[0]
        );
    }
}

/// One compound product over GroupCOO alone is Insum's one fused kernel,
/// unless its split does at most half the products: GNN's `A * X * W`
/// keeps `A * X` per row of A and multiplies it by W once a row (4x faster
/// on cora, 1.5 -> 0.3 ms), and runs as a program, with a note that gives
/// both counts; a product whose temporary is one per entry of A (W summed
/// over A's column too) stays the one kernel.
#[test]
fn a_product_over_group_coo_runs_as_a_program_where_its_split_does_fewer_products() {
    let a = spindle_formats::generate::uniform::<f64, i64>(120, 90, 900, 3).unwrap();
    let gnn = Problem::new("Z[i,j] = A[i,k] * X[k,h] * W[h,j]")
        .tensor("A", a.clone())
        .tensor("X", dense(&[90, 24], 1))
        .tensor("W", dense(&[24, 8], 2))
        .format("A", "groupcoo:dim=0,g=4");
    assert!(gnn.is_program());
    let ran = run(&gnn, "trie");
    assert_eq!(ran.statements.len(), 2, "{:?}", ran.statements);
    assert!(ran.checks[0].passed(), "{:?}", ran.checks);
    assert!(ran.notes.iter().any(|n| n.contains("so it runs as a program")), "{:?}", ran.notes);
    // (Each entry of A meets its own slice of W: nothing to keep per row.)
    let per_entry = Problem::new("Z[i,j] = A[i,k] * X[k,h] * W[k,h,j]")
        .tensor("A", a)
        .tensor("X", dense(&[90, 24], 1))
        .tensor("W", dense(&[90, 24, 8], 2))
        .format("A", "groupcoo:dim=0,g=4");
    assert!(!per_entry.is_program());
}

/// Input-sensitive fusion (§4.3.3): where the sum a temporary holds runs
/// about once (MTTKRP on a tensor whose (i, j) fibers hold one entry), trie
/// fuses maximally and says so; with longer fibers it keeps its temporary.
#[test]
fn input_sensitive_fusion_skips_temporaries_of_one_term_sums() {
    let mttkrp = |density: f64| {
        problem(
            "A[i,r] = X[i,j,k] * C[k,r] * B[j,r]",
            &[("C", &[12, 4]), ("B", &[10, 4])],
            &[("X", &[8, 10, 12], density, "csf")],
            &[],
        )
    };
    let short = run(&mttkrp(0.01), "trie");
    assert!(short.checks[0].passed());
    assert!(short.notes.iter().any(|n| n.contains("input-sensitive")), "{:?}", short.notes);
    let long = run(&mttkrp(0.5), "trie");
    assert!(long.checks[0].passed());
    assert!(long.notes.is_empty(), "{:?}", long.notes);
    assert!(long.kernels[0].contains("local T1[4]"), "{}", long.kernels[0]);
    // Over COO a row's entries are a run of equal coordinates of its first
    // level: the sum over `k` runs over the run (3 entries a row here),
    // not once per position as the per-position count said ("1.00 times
    // on average", fused maximally).
    let gnn = |format: &str| {
        problem(
            "H[i,h] = A[i,k] * X[k,h]; Z[i,j] = H[i,h] * W[h,j]",
            &[("X", &[20, 8]), ("W", &[8, 5])],
            &[("A", &[20, 20], 0.15, format)],
            &[],
        )
    };
    for format in ["csr", "coo"] {
        let ran = run(&gnn(format), "trie");
        assert!(ran.checks[0].passed(), "{format}");
        assert!(!ran.notes.iter().any(|n| n.contains("input-sensitive")), "{format}: {:?}", ran.notes);
    }
}

/// A convolution inside a compound product or a program: its windows are
/// walked by subsection loops, which a program's shared loops are not, so
/// the product runs as one statement and a program one kernel per
/// statement (both were refused: "the level path reads `I` at plain
/// indices", with a note to give `I` the format it had).
#[test]
fn convolutions_in_products_and_programs_run() {
    let three = problem(
        "O[i,j] = I[i+p,j+q] * F[p,q] * G[p]",
        &[("F", &[3, 3]), ("G", &[3]), ("O", &[10, 10])],
        &[("I", &[12, 12], 0.3, "csr")],
        &[],
    );
    assert!(!three.is_program());
    let prepared = three.prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let got = compiled.run().unwrap();
    assert!(compiled.compare(&got).unwrap().passed());
    let program = problem(
        "T[i,j] = I[i+p,j+q] * F[p,q]; O[i,j] = T[i,j] * G[i,j]",
        &[("F", &[3, 3]), ("G", &[10, 10]), ("T", &[10, 10])],
        &[("I", &[12, 12], 0.3, "csr")],
        &[],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&program, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()) && ran.checks.len() == 2, "{fusion}: {:?}", ran.checks);
        assert!(
            ran.notes.iter().any(|n| n.contains("each statement runs as its own kernel")),
            "{:?}",
            ran.notes
        );
    }
}

/// A statement whose output nothing later reads is named: only the last
/// statement's output is the program's (it was dropped without a word).
#[test]
fn an_output_no_statement_reads_is_named() {
    let p = problem(
        "y[i] = A[i,j] * x[j]; z[i] = A[i,j] * w[j]",
        &[("x", &[5]), ("w", &[5])],
        &[("A", &[6, 5], 0.5, "csr")],
        &[],
    );
    let ran = run(&p, "trie");
    assert!(
        ran.notes.iter().any(|n| n.contains("`y` (statement 1) is read by no later statement")),
        "{:?}",
        ran.notes
    );
    assert_eq!(ran.output, "z");
}

/// `order=` against a stored operand's levels is passed over in a program
/// (a statement alone refuses it); the note names the statement and the
/// operand (it was silent). An order the storage allows gets none.
#[test]
fn an_order_a_stored_operand_cannot_follow_is_noted() {
    let p =
        problem("t[i] = A[i,j] * x[j]; y[i] = t[i] * 2", &[("x", &[5])], &[("A", &[6, 5], 0.5, "csr")], &[]);
    let ran = |order: &str| {
        let schedule: Schedule = format!("fusion=trie order={order}").parse().unwrap();
        p.run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true).unwrap()
    };
    let against = ran("j+i");
    assert!(against.checks.iter().all(|c| c.passed()), "{:?}", against.checks);
    let note =
        "order=j+i: statement 1 (`t[i] = A[i,j] * x[j]`) runs `i` before `j`: `A` stores `i` above `j`";
    assert!(against.notes.iter().any(|n| n == note), "{:?}", against.notes);
    let along = ran("i+j");
    assert!(!along.notes.iter().any(|n| n.starts_with("order=")), "{:?}", along.notes);
}

/// Statements index independently: `i` of a consumer `y[i] = B[i,k] *
/// t[k]` is not the producer's `i` of `t[i] = A[i,j] * x[j]`. Sparsity
/// propagated from the consumer's `B` at `k` once made the producer's `i`
/// loop walk B's rows (found by the name `i`), so `t` was computed on B's
/// stored rows only, under every fusion. Under the same names a mask still
/// propagates (`programs_over_levels_whose_rows_repeat`).
#[test]
fn a_producer_read_at_another_index_walks_its_own_rows() {
    let statement = "t[i] = A[i,j] * x[j]; y[i] = B[i,k] * t[k]";
    for format in ["dcsr", "csr", "coo"] {
        let p = problem(
            statement,
            &[("x", &[30])],
            &[("A", &[30, 30], 0.2, "csr"), ("B", &[30, 30], 0.1, format)],
            &[],
        );
        for fusion in ["none", "trie"] {
            let ran = run(&p, fusion);
            assert!(
                ran.checks.iter().all(|c| c.passed()),
                "B in {format}, fusion={fusion}: {:?}\n{}",
                ran.checks,
                ran.kernels.join("\n")
            );
        }
    }
}

/// A `max=` statement in a program (its zeros counted, which a program
/// kernel's sums do not do): each statement runs as its own kernel under
/// none and trie, saying why; maximal fusion says why it cannot substitute.
#[test]
fn a_max_statement_in_a_program_runs_as_its_own_kernel() {
    let p = problem(
        "t[i] max= A[i,j] * x[j]; y[i] = t[i] * A[i,k] * z[k]",
        &[("x", &[30]), ("z", &[30])],
        &[("A", &[30, 30], 0.2, "csr")],
        &[],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&p, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()), "fusion={fusion}: {:?}", ran.checks);
        assert!(ran.notes.iter().any(|n| n.contains("`max=` in a program kernel")), "{:?}", ran.notes);
    }
    let schedule: Schedule = "fusion=maximal".parse().unwrap();
    let err = p
        .run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("written with `max=`"), "{err}");
}

/// A sum does not distribute over a maximum: maximal fusion refuses to
/// substitute a summing temporary into a `max=` statement (it took the max
/// over the sum's terms), and trie, the default, runs the statements apart.
/// Index names that a program kernel cannot give one loop (another extent,
/// another storage order) run the statements apart too (they were refused
/// under every fusion).
#[test]
fn statements_that_one_kernel_cannot_hold_run_apart() {
    let p = problem(
        "t[i] = A[i,j] * x[j]; y[i] max= B[i,k] * t[k]",
        &[("x", &[30])],
        &[("A", &[30, 30], 0.2, "csr"), ("B", &[30, 30], 0.2, "csr")],
        &[],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&p, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()), "fusion={fusion}: {:?}", ran.checks);
        assert_eq!(ran.kernels.len(), 2, "fusion={fusion}: {:?}", ran.notes);
    }
    let schedule: Schedule = "fusion=maximal".parse().unwrap();
    let err = p
        .run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not distribute over a maximum"), "{err}");
    let extents = problem(
        "t[i] = A[i,j] * x[j]; y[i] = B[i,k] * t[k]",
        &[("x", &[40])],
        &[("A", &[25, 40], 0.2, "csr"), ("B", &[17, 25], 0.2, "csr")],
        &[],
    );
    let orders = problem(
        "t[j] = A[j,i] * x[i]; y[i] = B[i,j] * t[j]",
        &[("x", &[30])],
        &[("A", &[30, 30], 0.2, "csc"), ("B", &[30, 30], 0.2, "csc")],
        &[],
    );
    for (p, what) in [(&extents, "another extent"), (&orders, "storage order")] {
        for fusion in ["none", "trie"] {
            let ran = run(p, fusion);
            assert!(ran.checks.iter().all(|c| c.passed()), "{what}, fusion={fusion}: {:?}", ran.checks);
        }
    }
}

/// Dead values under a function: `Y = A * exp(T)` needs `T` only where `A`
/// has entries, though exp(0) is 1 (the product with `A` is zero there),
/// so the producer walks A (it computed `T` at every (i,j): 146x slower
/// on cora).
#[test]
fn a_temporary_read_under_a_function_is_computed_where_the_mask_has_entries() {
    let p = problem(
        "T[i,j] = U[i,k] * V[j,k]; Y[i,j] = A[i,j] * exp(T[i,j])",
        &[("U", &[20, 6]), ("V", &[24, 6])],
        &[("A", &[20, 24], 0.2, "csr")],
        &[],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&p, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()), "fusion={fusion}: {:?}", ran.checks);
        let walks = enclosing(&ran.kernels[0], "(U[i,k] * V[j,k])");
        assert!(walks.iter().any(|l| l.starts_with("merge j over pA1 = A")), "{fusion}: {}", ran.kernels[0]);
    }
}

/// A temporary with a second reader that needs every coordinate (`Z = Y +
/// T` beside `Y = A * T`, or `T[j,i]` beside `A[i,j] * T[i,j]`) is computed
/// at every coordinate: one reader's mask made the producer walk A, and
/// the other read zeros, under every fusion.
#[test]
fn a_temporary_is_masked_only_where_every_read_agrees() {
    for statement in [
        "T[i,j] = U[i,k] * V[j,k]; Y[i,j] = A[i,j] * T[i,j]; Z[i,j] = Y[i,j] + T[i,j]",
        "T[i,j] = U[i,k] * V[j,k]; Y[i,j] = A[i,j] * T[i,j] * T[j,i]",
    ] {
        let p = problem(statement, &[("U", &[20, 6]), ("V", &[20, 6])], &[("A", &[20, 20], 0.2, "csr")], &[]);
        for fusion in ["none", "trie"] {
            let ran = run(&p, fusion);
            assert!(
                ran.checks.iter().all(|c| c.passed()),
                "{statement}, fusion={fusion}: {:?}\n{}",
                ran.checks,
                ran.kernels.join("\n")
            );
        }
    }
}

/// A statement joins a fused group only where the statements it depends
/// on run before the group: `y = s + t` joined `t`'s loop, placed before
/// `s`'s, and read `s` before it was written (trie).
#[test]
fn a_statement_fuses_only_after_what_it_reads() {
    let p = problem(
        "t[i] = w[i] * 2; s[i] = x[i] * 3; y[i] = s[i] + t[i]",
        &[("w", &[5]), ("x", &[5])],
        &[],
        &[],
    );
    let ran = run(&p, "trie");
    assert!(ran.checks.iter().all(|c| c.passed()), "{:?}\n{}", ran.checks, ran.forest);
}

/// Statements index apart: a temporary's producer whose summed index has
/// the name of the consumer's row (`t[j] = w[i] * x[j]` beside `A[i,j] *
/// t[j]`) is not masked by A's columns under its own `i` (it summed over
/// A's entries only), and a consumer is not masked by an operand that its
/// producer walks under an index the temporary does not carry (`t[i] =
/// C[j,i]`, read as `t[i]` under `y[j]`'s `j`).
#[test]
fn a_mask_propagates_only_through_the_indices_a_temporary_carries() {
    type Dense<'a> = &'a [(&'a str, &'a [usize])];
    type Sparse<'a> = &'a [(&'a str, &'a [usize], f64, &'a str)];
    let cases: [(&str, Dense, Sparse); 3] = [
        (
            "t[j] = w[i] * x[j]; y[i] = A[i,j] * t[j]",
            &[("w", &[6]), ("x", &[5])],
            &[("A", &[6, 5], 0.3, "csr")],
        ),
        (
            "t[j] = U[i,k] * V[j,k]; y[i] = A[i,j] * t[j]",
            &[("U", &[6, 3]), ("V", &[5, 3])],
            &[("A", &[6, 5], 0.3, "csr")],
        ),
        (
            "t[i] = C[j,i]; T1[i,j] = B[i,j] * t[i]; y[j] = T1[i,j] * t[i]",
            &[],
            &[("B", &[8, 8], 0.3, "csc"), ("C", &[8, 8], 0.3, "csr")],
        ),
    ];
    for (statement, dense, sparse) in cases {
        let p = problem(statement, dense, sparse, &[]);
        for fusion in ["none", "trie"] {
            let ran = run(&p, fusion);
            assert!(
                ran.checks.iter().all(|c| c.passed()),
                "{statement}, fusion={fusion}: {:?}\n{}",
                ran.checks,
                ran.forest
            );
        }
    }
}

/// SDDMM into SpMM (`S = A * (X Y^T)`, `Z = S X`): the mask reaches the
/// last product through the temporary the second statement makes, so
/// under trie the dot product and the row update share A's loops and both
/// temporaries are scalars (the last product ran over every (i, j), with
/// `S` dense). Over COO and GroupCOO too: their rows repeat, but each
/// position of the last level is one element (GroupCOO's padding repeats
/// a coordinate with value 0, a term of 0 in every product over it), and
/// every statement carries both levels' indices (they fused maximally,
/// 38x and 65x slower). A temporary read transposed (`T1[j,i]`) is not
/// carried: the trie forest keeps it dense, about 25 times the products
/// of the statements substituted into one, so trie fuses maximally,
/// saying why.
#[test]
fn a_mask_propagates_through_a_chain_of_temporaries() {
    let sddmm_spmm = |format: &str| {
        problem(
            "S[i,j] = A[i,j] * X[i,k] * Y[j,k]; Z[i,n] = S[i,j] * X[j,n]",
            &[("X", &[400, 64]), ("Y", &[400, 64])],
            &[("A", &[400, 400], 0.01, format)],
            &[],
        )
    };
    for format in ["csr", "dcsr", "csc", "coo", "groupcoo:dim=0,g=2"] {
        let ran = run(&sddmm_spmm(format), "trie");
        let kernel = &ran.kernels[0];
        assert!(ran.checks[0].passed(), "{format}: {:?}", ran.checks);
        assert!(
            kernel.contains("local S (a scalar)") && kernel.contains("local T1 (a scalar)"),
            "{format}\n{kernel}"
        );
        assert!(under(kernel, "Z[i,n] += (S * X[j,n])", "j"), "{format}\n{kernel}");
        // (The mask multiplies the dot product once it is done.)
        assert_eq!(ran.statements[..2], ["T1[i,j] = X[i,k] * Y[j,k]", "S[i,j] = T1[i,j] * A[i,j]"]);
        assert!(
            ran.notes.iter().all(|n| n.starts_with("the product is split as")),
            "{format}: {:?}",
            ran.notes
        );
    }
    let transposed = problem(
        "T1[i,j] = X[i,k] * Y[j,k]; S[i,j] = A[i,j] * T1[j,i]; Z[i,n] = S[i,j] * W[j,n]",
        &[("X", &[400, 64]), ("Y", &[400, 64]), ("W", &[400, 4])],
        &[("A", &[400, 400], 0.01, "csr")],
        &[],
    );
    let ran = run(&transposed, "trie");
    assert!(ran.checks[0].passed(), "{:?}", ran.checks);
    assert_eq!(ran.statements.len(), 1, "{:?}", ran.statements);
    assert!(
        ran.notes.iter().any(|n| n.contains("its loops over i (400), j (400), k (64) dense")
            && n.contains("so fused maximally")),
        "{:?}",
        ran.notes
    );
}

/// A divisor that is not zero where its stored operand has no entry
/// (`exp(C) + 1`) runs in a program as it does alone (it was refused as
/// "a stored divisor"); one that is (`C` itself) is still refused.
#[test]
fn a_program_divides_by_stored_operands_that_are_not_zero_where_absent() {
    let p = problem(
        "T[i,j] = C[i,j] / (exp(C[i,j]) + 1); y[i] = T[i,j]",
        &[],
        &[("C", &[6, 5], 0.3, "csr")],
        &[],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&p, fusion);
        assert!(ran.checks.iter().all(|c| c.passed()), "fusion={fusion}: {:?}", ran.checks);
    }
    let p =
        problem("T[i,j] = x[j] / C[i,j]; y[i] = T[i,j]", &[("x", &[5])], &[("C", &[6, 5], 0.3, "csr")], &[]);
    let schedule: Schedule = "fusion=none".parse().unwrap();
    let err = p
        .run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("divides by its zeros"), "{err}");
}

/// A sparse output that no operand's pattern holds (`exp(T)` is not zero
/// where `A` is) runs in the last statement's own kernel, assembled in its
/// format (it came back dense, the format dropped without a word).
#[test]
fn a_sparse_output_of_statements_run_apart_is_assembled() {
    let p = problem(
        "T[i,j] = A[i,j] * 2; Y[i,j] = exp(T[i,j])",
        &[],
        &[("A", &[6, 5], 0.3, "csr")],
        &[("Y", "csr")],
    );
    for fusion in ["none", "trie"] {
        let ran = run(&p, fusion);
        assert!(
            ran.checks.iter().all(|c| c.passed()) && !ran.checks.is_empty(),
            "{fusion}: {:?}",
            ran.checks
        );
        let assembled = ran.assembled.as_ref().unwrap_or_else(|| panic!("{fusion}: dense, {:?}", ran.notes));
        assert_eq!(assembled.nnz(), 30, "{fusion}: exp is never zero");
    }
}

/// Dividing by a row's sum where A has an empty row: the kernels write
/// nothing there (0/0 is never computed), and the reference walks A's
/// entries as they do; it had walked the program densely, 0/0 = NaN
/// against the kernels' 0, and every check failed.
#[test]
fn a_row_normalised_over_an_empty_row_checks() {
    let mut a = ndarray::Array2::from_shape_fn((6, 5), |(i, j)| 0.5 + ((i * 5 + j) % 7) as f64 / 7.0);
    a.row_mut(2).fill(0.0);
    // (Maximal fusion refuses: `t` sums over j and is read outside a product.)
    for fusion in ["none", "trie"] {
        let p = Problem::new("t[i] = A[i,j]; y[i,j] = A[i,j] / t[i]")
            .tensor("A", Input::from(a.clone().into_dyn()))
            .format("A", "csr");
        let run = run(&p, fusion);
        assert!(run.checks.iter().all(|c| c.passed()), "{fusion}: {:?}", run.checks);
        assert!(run.result.iter().all(|x| x.is_finite()), "{fusion}");
        assert_eq!(run.result[[2, 1]], 0.0);
    }
}
