//! The driver end to end on the C backend: data in every form, formats,
//! schedules, autotuning with its cache, and errors that say what is wrong.

use ndarray::{Array2, ArrayD};
use spindle::autotune::TuneCache;
use spindle::{CBackend, ElemType, Error, Input, Lowering, Problem, Schedule, TimingOptions, Tuner};
use spindle_formats::{Coo, DType, IType};

fn spmm(format: &str) -> Problem {
    Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", Input::random(&[40, 30], DType::F32, 1))
        .tensor("B", Input::random(&[30, 8], DType::F32, 2))
        .format("A", format)
}

#[test]
fn every_format_matches_the_reference() {
    let backend = CBackend::new();
    for format in ["coo", "csr", "ell", "groupcoo:dim=0,g=2", "groupcoo:dim=0,g=auto", "bcsr:bm=3,bk=4"] {
        let prepared = spmm(format).prepare().unwrap();
        // ELL's rows are the matrix's own `m`; the others iterate entries `p`.
        let rows = if format == "ell" { "m" } else { "p" };
        for schedule in ["", "tile.p=1 threads=1", "tile.p=4 tile.n=8 threads=2", "reduce=atomic threads=2"] {
            let schedule: Schedule = schedule.replace("tile.p", &format!("tile.{rows}")).parse().unwrap();
            let (out, check) = prepared.compile(&backend, &schedule).unwrap().check().unwrap();
            assert_eq!(out.shape(), [40, 8]);
            assert!(check.passed(), "{format} [{schedule}]: {check:?}");
            // The data are random and non-zero: a zero output would be a bug.
            assert!(out.iter().any(|x| *x != 0.0));
        }
    }
}

/// The reference walks a stored operand's entries, not its format's
/// arrays: ELL's and GroupCOO's padding multiplies a zero by B's row at a
/// repeated coordinate, so an infinite value there made NaN in the kernel
/// and in a reference that walked the padding too, and the check passed.
/// Now the check sees it, and a note says why before the run; CSR's kernel
/// multiplies the entries alone and passes.
#[test]
fn the_reference_walks_entries_not_a_formats_padding() {
    use spindle::Backend;
    // Row 1 holds one entry at column 1, padded to the longest row (3);
    // row 3 is empty, which ELL pads whole at column 0.
    let a = Coo::<f64, i64>::from_triplets(
        4,
        4,
        &[(0, 0, 1.0), (0, 1, 2.0), (0, 2, 3.0), (1, 1, 4.0), (2, 3, 5.0)],
    )
    .unwrap();
    let mut b = ArrayD::from_elem(vec![4, 2], 1.0);
    b[[1, 0]] = f64::INFINITY;
    b[[0, 1]] = f64::NEG_INFINITY;
    let (c, emulate) = (CBackend::new(), spindle::EmulateBackend::from_env());
    // The padded formats skip their padding (on the tile path by a mask of
    // it, on the level path by its repeated coordinates); the blocks of
    // BCSR store zeros that multiply the infinities, which a note says.
    let cases = [
        ("ell", "", true),
        ("ell", "path=levels", true),
        ("groupcoo:dim=0,g=2", "", true),
        ("groupcoo:dim=0,g=2", "reduce=atomic", true),
        ("groupcoo:dim=0,g=2", "path=levels", true),
        ("csr", "", true),
        ("coo", "", true),
        ("bcsr:bm=2,bk=2", "", false),
    ];
    for (format, schedule, passes) in cases {
        let prepared = Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", a.clone())
            .tensor("B", b.clone())
            .format("A", format)
            .prepare()
            .unwrap();
        let schedule: Schedule = schedule.parse().unwrap();
        for backend in [&c as &dyn Backend, &emulate] {
            let on = format!("{format} {schedule} on {}", backend.device());
            let compiled = match prepared.compile(backend, &schedule) {
                Ok(compiled) => compiled,
                // The emulation runs the tile path alone.
                Err(e) if schedule.path == spindle::ir::kernel::schedule::Path::Levels => {
                    assert!(backend.device() != c.device(), "{on}: {}", e.render(false));
                    continue;
                }
                Err(e) => panic!("{on}: {}", e.render(false)),
            };
            let (out, check) = compiled.check().unwrap();
            assert_eq!(check.passed(), passes, "{on}: {check:?}, {out:?}");
            assert_eq!(out.iter().any(|x| x.is_nan()), !passes, "{on}: {out:?}");
        }
        let note = prepared.stored_zeros_note();
        assert_eq!(note.is_some(), !matches!(format, "csr" | "coo"), "{format}: {note:?}");
        if let Some(note) = note {
            assert!(note.contains("`B` holds 2 non-finite value(s)"), "{note}");
            let skips = note.contains("the kernel skips the padding of `A`");
            assert_eq!(skips, passes, "{note}");
            assert_eq!(note.contains("--format A=csr"), !passes, "{note}");
        }
    }
}

/// A stored operand read at two subscripts is checked as the kernel runs
/// it, one read walked by its entries and the other as a copy read dense:
/// `A A x` on a 3000 x 3000 matrix was walked over its dense index space
/// (2.7e10 points) and refused.
#[test]
fn the_reference_reads_a_reread_operand_as_a_copy() {
    let a: Coo<f64, i64> = spindle_formats::generate::uniform(3000, 3000, 9000, 5).unwrap();
    for format in ["csr", "dcsr", "coo"] {
        let problem = Problem::new("z[i] = A[i,j] * A[j,k] * x[k]")
            .tensor("A", a.clone())
            .format("A", format)
            .tensor("x", Input::random(&[3000], DType::F64, 6));
        let schedule: Schedule = "fusion=trie".parse().unwrap();
        let run =
            problem.run_program(&CBackend::new(), &schedule, TimingOptions { warmup: 0, repeats: 1 }, true);
        let run = run.unwrap_or_else(|e| panic!("{format}: {}", e.render(false)));
        assert!(run.checks.iter().all(|c| c.passed()), "{format}: {:?}", run.checks);
        assert!(run.result.iter().any(|z| *z != 0.0), "{format}");
    }
}

/// A product of two sums over different indices: the native matmul pass
/// made the sum over `k` a dot inside the loop and multiplied it into the
/// accumulator after the loop, where the C printer had no such value (`v13
/// undeclared`) and, were it there, it would be one `k` tile's partial.
#[test]
fn a_product_of_two_sums_over_tiles() {
    let backend = CBackend::new();
    let prepared = Problem::new("z[i] = (A[i,j] * x[j]) * (A[i,k] * x[k])")
        .tensor("A", Input::random(&[12, 10], DType::F32, 1))
        .tensor("x", Input::random(&[10], DType::F32, 2))
        .prepare()
        .unwrap();
    for schedule in ["", "tile.i=1", "tile.j=2 tile.k=4", "tile.j=16 tile.k=2", "reduce=atomic", "matmul=off"]
    {
        let compiled = prepared.compile(&backend, &schedule.parse().unwrap()).unwrap();
        let (out, check) = compiled.check().unwrap();
        assert!(check.passed(), "[{schedule}]: {check:?}");
        assert!(out.iter().any(|x| *x != 0.0));
    }
}

/// A sparse output without rows (a 0 x 5 operand) assembles no entry: its
/// kernel counted per row of none and declared no counters (`n1
/// undeclared`), in CSR and CSC, copied or multiplied.
#[test]
fn sparse_outputs_without_rows_assemble_nothing() {
    let empty = |rows: usize, cols: usize| {
        Input::from(Coo::<f64, i64>::new(vec![rows, cols], vec![vec![], vec![]], vec![]).unwrap())
    };
    let backend = CBackend::new();
    let cases = [
        Problem::new("C[i,j] = A[i,j]").tensor("A", empty(0, 5)).format("A", "csr").format("C", "csr"),
        Problem::new("C[i,j] = A[i,j]").tensor("A", empty(0, 0)).format("A", "csr").format("C", "csr"),
        Problem::new("C[i,j] = A[i,j]").tensor("A", empty(5, 0)).format("A", "dcsc").format("C", "csc"),
        Problem::new("C[i,j] = A[i,k] * B[k,j]")
            .tensor("A", empty(0, 5))
            .tensor("B", Input::random(&[5, 3], DType::F32, 1))
            .format("A", "csr")
            .format("C", "csr"),
    ];
    for problem in cases {
        let prepared = problem.prepare().unwrap();
        for threads in ["threads=1", "threads=2"] {
            let schedule: Schedule = format!("path=levels {threads}").parse().unwrap();
            let compiled =
                prepared.compile(&backend, &schedule).unwrap_or_else(|e| panic!("{}: {e}", prepared.text));
            let (assembled, _) = compiled.assemble_and_time(TimingOptions { warmup: 0, repeats: 1 }).unwrap();
            assert_eq!(assembled.nnz(), 0);
            assert!(compiled.compare_assembled(&assembled).unwrap().passed());
        }
    }
}

/// A statement over a CSF tensor too large to copy dense is checked over
/// its entries in COO (the reference refused: "would need `T` dense").
#[test]
fn the_reference_walks_the_entries_of_formats_the_tile_path_refuses() {
    let entries: Vec<(Vec<i64>, f64)> = (0..400)
        .map(|e| (vec![(e * 7) % 300, (e * 13) % 300, (e * 29) % 300], 0.5 + (e % 5) as f64))
        .collect();
    let coords: Vec<Vec<i64>> = (0..3).map(|d| entries.iter().map(|(c, _)| c[d]).collect()).collect();
    let t =
        Coo::<f64, i64>::new(vec![300, 300, 300], coords, entries.iter().map(|(_, v)| *v).collect()).unwrap();
    let prepared = Problem::new("A[i,j,r] = T[i,j,k] * C[k,r]")
        .tensor("T", Input::from(t))
        .tensor("C", Input::random(&[300, 2], DType::F32, 3))
        .format("T", "csf")
        .prepare()
        .unwrap();
    assert!(prepared.tile_refusal.is_some());
    let compiled = prepared.compile(&CBackend::new(), &"path=levels".parse().unwrap()).unwrap();
    let (out, check) = compiled.check().unwrap();
    assert!(check.passed(), "{check:?}");
    assert!(out.iter().any(|x| *x != 0.0));
}

#[test]
fn ndarray_sprs_and_coo_inputs_agree() {
    let dense =
        Array2::from_shape_fn((5, 4), |(i, j)| if (i + j) % 3 == 0 { (i * 4 + j) as f32 + 0.5 } else { 0.0 });
    let csr = sprs::CsMat::csr_from_dense(dense.view(), 0.0);
    let coo = Coo::<f32, i32>::from_ndarray(&dense.clone().into_dyn()).unwrap();
    let x = ndarray::Array1::from_vec(vec![1.0f32, -2.0, 0.5, 3.0]);
    let run = |a: Input| {
        let prepared = Problem::new("y[i] = A[i,j] * x[j]")
            .tensor("A", a)
            .tensor("x", x.clone())
            .format("A", "csr")
            .prepare()
            .unwrap();
        let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
        let (out, check) = compiled.check().unwrap();
        assert!(check.passed());
        out
    };
    let want: Vec<f64> = dense.dot(&x).iter().map(|&v| v as f64).collect();
    for a in [Input::from(dense.clone()), Input::from(&csr), Input::from(coo)] {
        assert_eq!(run(a).into_raw_vec_and_offset().0, want);
    }
}

#[test]
fn the_indirect_form_and_the_output_init() {
    // `+=` accumulates into the output's data; `=` overwrites it.
    let base = |op: &str| {
        Problem::new(format!("C[AM[p],n] {op} AV[p] * B[AK[p],n]"))
            .tensor("AM", Input::random_indices(&[50], IType::I32, 1, 10))
            .tensor("AK", Input::random_indices(&[50], IType::I64, 2, 12))
            .tensor("AV", Input::random(&[50], DType::F64, 3))
            .tensor("B", Input::random(&[12, 4], DType::F64, 4))
            .tensor("C", Input::random(&[10, 4], DType::F64, 5))
    };
    let backend = CBackend::new();
    let plus = base("+=").prepare().unwrap();
    let set = base("=").prepare().unwrap();
    let a = plus.compile(&backend, &Schedule::default()).unwrap().check().unwrap();
    let b = set.compile(&backend, &Schedule::default()).unwrap().check().unwrap();
    assert!(a.1.passed() && b.1.passed());
    let initial = match &plus.data["C"] {
        spindle::ir::tensor::TensorValue::Values(v) => v.clone(),
        _ => unreachable!(),
    };
    let diff: ArrayD<f64> = &a.0 - &b.0;
    assert!(diff.iter().zip(initial.iter()).all(|(d, c)| (d - c).abs() < 1e-12));
}

#[test]
fn timing_resets_the_output_every_launch() {
    let prepared = spmm("csr").prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &"threads=1".parse().unwrap()).unwrap();
    let once = compiled.run().unwrap();
    let (after, timing) = compiled.run_and_time(TimingOptions { warmup: 3, repeats: 7 }).unwrap();
    // Ten launches of `+=` still leave one launch's result.
    assert_eq!(once, after);
    assert_eq!(timing.runs, 7);
    assert!(timing.min_ms <= timing.median_ms && timing.median_ms <= timing.max_ms);
}

#[test]
fn autotuning_searches_once_per_problem_and_device() {
    let dir = std::env::temp_dir().join(format!("spindle-driver-tune-{}", std::process::id()));
    let path = dir.join("autotune.json");
    let prepared = spmm("groupcoo:dim=0,g=2").prepare().unwrap();
    let backend = CBackend::new();
    let mut tuner = Tuner::with_cache(TuneCache::load(&path));
    let first = prepared.autotune(&backend, &mut tuner).unwrap();
    let tuned = first.tuned.clone().unwrap();
    assert!(tuned.tried.len() >= 3, "{:?}", tuned.tried);
    assert!(tuned.tried.iter().all(|t| t.median_ms.is_some()), "{:?}", tuned.tried);
    assert!(first.check().unwrap().1.passed());
    // A group of GroupCOO is one tile; the rows' tiles divide their extent.
    // The level path's loops compete beside the tiles, where they lower.
    let (levels, tiles): (Vec<_>, Vec<_>) =
        tuned.tried.iter().partition(|t| t.schedule.contains("path=levels"));
    assert!(!levels.is_empty(), "{:?}", tuned.tried);
    assert!(tiles.iter().all(|t| t.schedule.contains("tile.q=2")));
    let rows = prepared.einsum.index("p").unwrap().extent;
    for t in &tiles {
        let s: Schedule = t.schedule.parse().unwrap();
        assert_eq!(rows % s.tiles["p"], 0, "{}", t.schedule);
    }

    // A new tuner on the same file finds the winner without measuring.
    let lines = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
    let seen = lines.clone();
    let mut again =
        Tuner::with_cache(TuneCache::load(&path)).on_progress(move |l| seen.borrow_mut().push(l.to_string()));
    let second = prepared.autotune(&backend, &mut again).unwrap();
    assert_eq!(second.schedule, first.schedule);
    assert!(lines.borrow().is_empty(), "{:?}", lines.borrow());

    // Threads fixed by the user: the search is over the other items.
    let mut fixed = Tuner::in_memory();
    fixed.threads = Some(1);
    let one = prepared.autotune(&backend, &mut fixed).unwrap();
    assert_eq!(one.schedule.threads, Some(1));
    assert!(one.tuned.unwrap().tried.iter().all(|t| t.schedule.ends_with("threads=1")));
    // On the tile path alone (what `bench rows` compares the level path with).
    let mut tiles_only = Tuner::in_memory();
    tiles_only.tile_path_only = true;
    let tiled = prepared.autotune(&backend, &mut tiles_only).unwrap();
    let tried = tiled.tuned.unwrap().tried;
    assert!(tried.len() >= 3 && tried.iter().all(|t| !t.schedule.contains("path=levels")), "{tried:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mistakes_say_where_and_why() {
    let statement = |e: Error| match e {
        Error::Statement { diagnostic, text } => (diagnostic.message, text),
        other => panic!("not a statement error: {other}"),
    };
    // A bad statement points into the user's text.
    let err = Problem::new("C[m,n] += A[m,k] * B[k,n")
        .tensor("A", Input::random(&[4, 3], DType::F32, 1))
        .prepare()
        .unwrap_err();
    let rendered = err.render(false);
    let (_, text) = statement(err);
    assert_eq!(text, "C[m,n] += A[m,k] * B[k,n");
    assert!(rendered.contains('^') || rendered.contains('─'), "{rendered}");

    // An unknown format, a missing file, a missing output shape.
    let err = spmm("zigzag").prepare().unwrap_err().to_string();
    assert!(err.starts_with("format of A:"), "{err}");
    let err = Problem::new("y[i] = A[i,j] * x[j]")
        .file("A", "/nonexistent/a.mtx")
        .tensor("x", Input::random(&[3], DType::F32, 1))
        .prepare()
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("tensor A:"), "{err}");
    let err = Problem::new("C[AM[p]] += AV[p]")
        .tensor("AM", Input::random_indices(&[5], IType::I32, 1, 3))
        .tensor("AV", Input::random(&[5], DType::F32, 2))
        .prepare()
        .unwrap_err()
        .to_string();
    assert!(err.contains("the shape of the output `C`"), "{err}");
    // Where an operand is unknown, that is the reason, at its place.
    let err = Problem::new("C[m,n] += A[m,k] * Z")
        .tensor("A", Input::random(&[4, 3], DType::F32, 1))
        .prepare()
        .unwrap_err();
    assert_eq!(statement(err).0, "unknown tensor `Z`");
    // A format for a tensor the statement does not have.
    let err = spmm("csr").format("Q", "csr").prepare().unwrap_err().to_string();
    assert_eq!(err, "format of Q: the statement has no tensor `Q` (its tensors: A, B, C)");
    // A declared shape that contradicts the data is refused, not ignored;
    // one that agrees changes the dtype.
    let err = spmm("csr")
        .declare("A", &[10, 10])
        .dtype("A", ElemType::Value(DType::F16))
        .prepare()
        .unwrap_err()
        .to_string();
    assert_eq!(err, "tensor A: its data is 40x30, but its shape is given as 10x10");
    // A value the kernel's dtype cannot hold is refused, not made infinite.
    let big = Coo::<f64, i64>::new(vec![2, 2], vec![vec![0, 1], vec![0, 1]], vec![1e10, 0.5]).unwrap();
    let err = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", Input::from(big).with_dtype(ElemType::Value(DType::F16)))
        .tensor("x", Input::random(&[2], DType::F16, 1))
        .format("A", "csr")
        .prepare()
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "tensor A: the value 10000000000 does not fit in f16 (it would be infinite in the kernel)"
    );
    let agreed =
        spmm("csr").declare("B", &[30, 8]).dtype("B", ElemType::Value(DType::F16)).prepare().unwrap();
    assert_eq!(agreed.einsum.tensors["B"].dtype, ElemType::Value(DType::F16));

    // A large sparse tensor read without a format is not made dense (that
    // would take 8 GB here): the caret sits under where it is read.
    let big = Coo::<f32, i32>::new(vec![32768, 32768], vec![vec![0, 1], vec![1, 0]], vec![1.0, 2.0]).unwrap();
    let err = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", big)
        .tensor("x", Input::random(&[32768], DType::F32, 1))
        .prepare()
        .unwrap_err();
    let rendered = err.render(false);
    let (message, _) = statement(err);
    assert!(message.contains("`A` is sparse (32768x32768) and has no format"), "{message}");
    assert!(rendered.contains("in csr"), "{rendered}");

    // An index out of range is refused before any kernel runs.
    let prepared = Problem::new("y[i] = AV[p] * X[AK[p], i]")
        .tensor("AK", Input::random_indices(&[6], IType::I32, 1, 9))
        .tensor("AV", Input::random(&[6], DType::F32, 2))
        .tensor("X", Input::random(&[4, 2], DType::F32, 3))
        .prepare();
    let err = match prepared {
        Ok(p) => p.compile(&CBackend::new(), &Schedule::default()).and_then(|c| c.run()).unwrap_err(),
        Err(e) => e,
    };
    assert!(err.to_string().contains("AK"), "{err}");

    // A dtype override reaches the kernel.
    let prepared = spmm("csr").dtype("B", ElemType::Value(DType::F16)).prepare().unwrap();
    assert_eq!(prepared.einsum.tensors["B"].dtype, ElemType::Value(DType::F16));
    let (_, check) = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap().check().unwrap();
    assert_eq!(check.tolerance, 1e-2);
    assert!(check.passed());
}

/// The CUDA printer's choices are schedule items, so they can be swept:
/// `tf32=on` puts an f32 product on Tensor Cores, `tensorcores=off` takes it
/// off again, `block=N` sets the threads per block.
#[test]
fn cuda_choices_are_schedule_items() {
    let f32 = spindle::ElemType::Value(DType::F32);
    let prepared = Problem::new("C[y,x] += A[y,r] * B[r,x]")
        .tensor("A", Input::shape(&[64, 64], f32))
        .tensor("B", Input::shape(&[64, 64], f32))
        .tensor("C", Input::shape(&[64, 64], f32))
        .prepare()
        .unwrap();
    let cuda = |items: &str| {
        let schedule: Schedule = format!("tile.y=32 tile.x=32 tile.r=16 {items}").parse().unwrap();
        let kernel = prepared.lower(&schedule).unwrap();
        spindle::print(&kernel, &schedule, spindle::Target::Cuda).unwrap()
    };
    assert!(!cuda("").contains("wmma::"), "f32 stays off Tensor Cores by default");
    assert!(cuda("tf32=on").contains("wmma::precision::tf32"));
    assert!(!cuda("tf32=on tensorcores=off").contains("wmma::"));
    assert!(cuda("block=64").contains("__launch_bounds__(64)"), "{}", cuda("block=64"));
}

#[test]
fn the_level_path_is_a_schedule_item() {
    let backend = CBackend::new();
    for format in ["csr", "csc", "dcsr", "coo", "csf", "groupcoo:dim=0,g=2"] {
        let prepared = spmm(format).prepare().unwrap();
        for schedule in ["path=levels", "path=levels threads=1", "path=levels threads=2"] {
            let compiled = prepared.compile(&backend, &schedule.parse().unwrap()).unwrap();
            assert!(matches!(compiled.kernel, Lowering::Levels(_)), "{format} [{schedule}]");
            let (out, check) = compiled.check().unwrap();
            assert!(check.passed(), "{format} [{schedule}]: {check:?}\n{}", compiled.source());
            assert!(out.iter().any(|x| *x != 0.0));
        }
    }
    // Without a stored operand there is nothing to iterate over.
    let dense = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", Input::random(&[4, 3], DType::F32, 1))
        .tensor("x", Input::random(&[3], DType::F32, 2))
        .prepare()
        .unwrap();
    let err = dense.compile(&backend, &"path=levels".parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("give an operand a format"), "{err}");
}

#[test]
fn a_convolution_over_a_generated_sparse_image_through_subsection_loops() {
    // A generated input works wherever a file does; the affine subscripts
    // of a stored operand take the level path's subsection loops.
    let problem = Problem::new("O[i,j] = I[i+p,j+q] * F[p,q]")
        .file("I", "gen:uniform:rows=60,cols=50,nnz=300,seed=3")
        .tensor("F", Input::random(&[3, 3], DType::F64, 4))
        .tensor("O", Input::shape(&[58, 48], ElemType::Value(DType::F64)))
        .format("I", "csr");
    let prepared = problem.prepare().unwrap();
    assert!(prepared.tile_refusal.is_some());
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let Lowering::Levels(kernel) = &compiled.kernel else { panic!("the level path") };
    assert!(kernel.to_string().contains("subsections"), "{kernel}");
    let (out, check) = compiled.check().unwrap();
    assert!(check.passed(), "{check:?}");
    assert!(out.iter().any(|x| *x != 0.0));
    let bad = Problem::new("O[i,j] = I[i+p,j+q] * F[p,q]").file("I", "gen:nothing:rows=3").prepare();
    assert!(bad.is_err());
}

/// An f16 output whose values lie beyond f16's range is infinite in the
/// kernel's output, and the reference, as f16 holds it, is too: the check
/// passes (it failed with an infinite error, blaming the kernel), and a
/// wrong finite value beside them still fails.
#[test]
fn an_overflowing_16_bit_output_is_checked_as_it_is_stored() {
    let half = ElemType::Value(DType::F16);
    let a = ArrayD::from_elem(vec![4, 8], 300.0);
    let x = ArrayD::from_elem(vec![8], 300.0);
    let problem = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", Input::from(a).with_dtype(half))
        .tensor("x", Input::from(x).with_dtype(half));
    let prepared = problem.prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let got = compiled.run().unwrap();
    assert!(got.iter().all(|v| v.is_infinite()), "{got:?}");
    assert!(compiled.compare(&got).unwrap().passed());
    let mut wrong = got.clone();
    wrong[[0]] = 1.0;
    assert!(!compiled.compare(&wrong).unwrap().passed());
}

/// A 16-bit sparse output is checked against the reference rounded as it
/// is stored, as a dense one is: the C backend's bf16 S = A*D reported an
/// error of 2e-3 (half a bf16 step) where its bytes were the exact
/// rounding, and the emulated GPU's same bytes reported 0.
#[test]
fn a_16_bit_sparse_output_is_checked_as_it_is_stored() {
    let bf16 = ElemType::Value(DType::Bf16);
    let prepared = Problem::new("S[i,j] = A[i,j] * D[i,j]")
        .tensor("A", Input::random(&[60, 50], DType::F32, 1))
        .tensor("D", Input::random(&[60, 50], DType::F32, 2).with_dtype(bf16))
        .tensor("S", Input::shape(&[60, 50], bf16))
        .format("A", "csr")
        .format("S", "csr")
        .prepare()
        .unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let (_, check) = compiled.check().unwrap();
    assert_eq!(check.stored, Some(3000), "{check:?}");
    assert!(check.max_rel_error < 1e-6, "{check:?}");
}

/// Segment reduction over BlockGroupCOO groups along the block index `p`
/// that the output's rows `32*R[p]+bi` reach through the index tensor, not
/// along `bi` (whose neighbours write neighbouring rows, so its runs were
/// one element long); checked on the emulated GPU.
#[test]
fn segments_of_block_rows_run_along_the_scattered_index() {
    let spec: spindle_formats::generate::GeneratorSpec =
        "blocks:rows=128,cols=96,bm=32,bk=32,density=0.5,seed=5".parse().unwrap();
    let a = spec.generate::<f64, i64>().unwrap();
    let half = ElemType::Value(DType::F16);
    let problem = Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", Input::from(a).with_dtype(half))
        .format("A", "blockgroupcoo:bm=32,bk=32,dim=0,g=2")
        .tensor("B", Input::random(&[96, 64], DType::F16, 1))
        .tensor("C", Input::shape(&[128, 64], half));
    let prepared = problem.prepare().unwrap();
    let schedule: Schedule = "reduce=segment(4) tile.p=4".parse().unwrap();
    let kernel = prepared.lower(&schedule).unwrap().to_string();
    assert!(kernel.contains("segment(4) over p"), "{kernel}");
    let backend = spindle::EmulateBackend::from_env();
    let compiled = prepared.compile(&backend, &schedule).unwrap();
    let got = compiled.run().unwrap();
    assert!(compiled.compare(&got).unwrap().passed());
}

/// A term `c*X[i]` whose index tensor's values carry it past 64-bit
/// integers is refused once the data are read (4·2^62 wrapped to 0 in the
/// kernel, where the reference saw it out of range); a small coefficient
/// runs.
#[test]
fn an_index_tensor_term_beyond_64_bit_integers_is_refused_with_its_data() {
    let problem = |coeff: &str| {
        Problem::new(format!("y[i] = x[X[i]*{coeff}]"))
            .tensor("x", Input::random(&[10], DType::F32, 1))
            .tensor("X", Input::random_indices(&[8], IType::I32, 3, 5))
    };
    let err = problem("4611686018427387904").prepare().unwrap_err().render(false);
    assert!(err.contains("can reach") && err.contains("beyond 64-bit integers"), "{err}");
    let prepared = problem("2").prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    assert!(compiled.compare(&compiled.run().unwrap()).unwrap().passed());
}

/// A dense output past the limit on one array is refused before anything
/// is compiled (a 10^10-element output aborted the process), in a
/// statement and as a program's output.
#[test]
fn a_dense_output_beyond_the_array_limit_is_refused_before_compiling() {
    let one = Problem::new("y[i,j] = 1 where i < 100000, j < 100000");
    let err = one.prepare().unwrap_err().render(false);
    assert!(err.contains("dense output `y` (100000x100000)") && err.contains("GiB limit"), "{err}");
    let program = Problem::new("y[i,j] = 1 where i < 100000, j < 100000; z[i,j] = y[i,j] * 2");
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let err = program.run_program(&CBackend::new(), &Schedule::default(), opts, false).unwrap_err();
    assert!(err.render(false).contains("dense output `z`"), "{}", err.render(false));
}

/// Outer-product SpGEMM (DCSC x DCSR into CSR) is checked over one
/// operand's entries with the other read dense: the dense walk of its
/// 2000^3 points was refused as past the evaluator's limit.
#[test]
fn an_outer_product_spgemm_is_checked_over_one_operands_entries() {
    let spec = |seed: u64| -> spindle_formats::generate::GeneratorSpec {
        format!("uniform:rows=2000,cols=2000,nnz=3000,seed={seed}").parse().unwrap()
    };
    let problem = Problem::new("C[i,j] = A[i,k] * B[k,j]")
        .tensor("A", spec(1).generate::<f64, i64>().unwrap())
        .format("A", "dcsc")
        .tensor("B", spec(2).generate::<f64, i64>().unwrap())
        .format("B", "dcsr")
        .tensor("C", Input::shape(&[2000, 2000], ElemType::Value(DType::F64)))
        .format("C", "csr");
    let prepared = problem.prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let (got, _) = compiled.assemble_and_time(TimingOptions { warmup: 0, repeats: 1 }).unwrap();
    let check = compiled.compare_assembled(&got).unwrap();
    assert!(check.passed() && check.stored.is_some_and(|n| n > 0), "{check:?}");
}

/// A product that folds to 0 over a compressed outermost level, on two
/// threads: its walk has nothing to do and prints no loop, so nothing is
/// shared out (the parallel-for pragma stood before a bare block, which
/// the C compiler refused), and the note says why it runs on one thread.
#[test]
fn a_product_folding_to_zero_runs_on_one_thread_and_says_why() {
    let a = Coo::<f64, i64>::from_triplets(6, 5, &[(0, 1, 1.0), (3, 4, 2.0), (5, 0, 3.0)]).unwrap();
    for (statement, output) in [("y[i] = A[i,j] * 0", None), ("C[i,j] = A[i,j] * 0.0", Some("cc"))] {
        let mut problem = Problem::new(statement).tensor("A", a.clone()).format("A", "dcsr");
        if let Some(format) = output {
            problem =
                problem.tensor("C", Input::shape(&[6, 5], ElemType::Value(DType::F64))).format("C", format);
        }
        let prepared = problem.prepare().unwrap();
        let compiled = prepared.compile(&CBackend::new(), &"threads=2".parse().unwrap()).unwrap();
        assert!(
            compiled.report().one_thread.as_deref().is_some_and(|w| w.contains("product is 0")),
            "{statement}"
        );
        let check = match compiled.assembles() {
            true => compiled.compare_assembled(
                &compiled.assemble_and_time(TimingOptions { warmup: 0, repeats: 1 }).unwrap().0,
            ),
            false => compiled.compare(&compiled.run().unwrap()),
        };
        assert!(check.unwrap().passed(), "{statement}");
    }
}

/// SpTTM over a CSF in its declared mode order gathers its output in a
/// workspace over every level; the advice names the CSF whose levels
/// follow the output, which then needs none of that advice.
#[test]
fn a_stored_operand_in_another_order_than_the_output_is_named_with_the_order_that_fits() {
    let t = Coo::new(
        vec![4, 3, 5],
        vec![vec![0, 1, 3, 3], vec![2, 0, 1, 2], vec![4, 1, 0, 3]],
        vec![1.0, 2.0, 3.0, 4.0],
    )
    .unwrap();
    let problem = |format: &str| {
        Problem::new("A[i,j,l] = T[k,i,j] * M[k,l]")
            .tensor("T", t.clone())
            .format("T", format)
            .tensor("M", Input::random(&[4, 2], DType::F64, 1))
            .tensor("A", Input::shape(&[3, 5, 2], ElemType::Value(DType::F64)))
            .format("A", "coo")
    };
    let prepared = problem("csf").prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    let advice = compiled.level_order_advice().expect("advice");
    assert!(advice.contains("(k, i, j)") && advice.contains("--format T=csf:modes=1-2-0"), "{advice}");
    let (got, _) = compiled.assemble_and_time(TimingOptions { warmup: 0, repeats: 1 }).unwrap();
    assert!(compiled.compare_assembled(&got).unwrap().passed());
    let prepared = problem("csf:modes=1-2-0").prepare().unwrap();
    let compiled = prepared.compile(&CBackend::new(), &Schedule::default()).unwrap();
    assert_eq!(compiled.level_order_advice(), None);
    let (got, _) = compiled.assemble_and_time(TimingOptions { warmup: 0, repeats: 1 }).unwrap();
    assert!(compiled.compare_assembled(&got).unwrap().passed());
}

/// A float `.npy` input keeps its file's type in the kernel (f64, f16: it
/// ran as f32 whatever the file held); `--shape X=:f32` still says otherwise.
#[test]
fn a_npy_input_keeps_its_files_float_type() {
    use spindle_formats::io::write_npy_values;
    let dir = std::env::temp_dir().join(format!("spindle-npy-dtype-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, x) = (dir.join("a.npy"), dir.join("x.npy"));
    let values: Vec<f64> = (0..12).map(|v| v as f64 / 7.0 + 0.1).collect();
    write_npy_values(&a, &[4, 3], &values).unwrap();
    let halves: Vec<half::f16> = values[..3].iter().map(|&v| half::f16::from_f64(v)).collect();
    write_npy_values(&x, &[3], &halves).unwrap();
    let problem = Problem::new("y[i] = A[i,j] * x[j]").file("A", &a).file("x", &x);
    let einsum = problem.check().unwrap();
    assert_eq!(einsum.tensors["A"].dtype, ElemType::Value(DType::F64));
    assert_eq!(einsum.tensors["x"].dtype, ElemType::Value(DType::F16));
    // NumPy's promotion: f64.
    assert_eq!(einsum.tensors["y"].dtype, ElemType::Value(DType::F64));
    let told = problem.dtype("x", ElemType::Value(DType::F32)).check().unwrap();
    assert_eq!(told.tensors["x"].dtype, ElemType::Value(DType::F32));
    std::fs::remove_dir_all(&dir).ok();
}

/// A compound product over BCSR is Insum's one fused tile kernel, as over
/// BlockGroupCOO (it went to the program path, which refused its blocked
/// levels); `map=rows` on the C backend adds no column tile.
#[test]
fn bcsr_products_fuse_on_tiles_and_map_rows_leaves_c_tiles_alone() {
    let backend = CBackend::new();
    let problem = Problem::new("C[i,j] = A[i,j] * X[i,k] * Y[j,k]")
        .tensor("A", Input::random(&[12, 10], DType::F32, 1))
        .tensor("X", Input::random(&[12, 4], DType::F32, 2))
        .tensor("Y", Input::random(&[10, 4], DType::F32, 3))
        .format("A", "bcsr:bm=4,bk=4");
    assert!(!problem.is_program());
    let (_, check) =
        problem.prepare().unwrap().compile(&backend, &Schedule::default()).unwrap().check().unwrap();
    assert!(check.passed(), "{check:?}");
    let prepared = spmm("blockgroupcoo:bm=4,bk=4,dim=0,g=1").prepare().unwrap();
    let compiled = prepared.compile(&backend, &"map=rows".parse().unwrap()).unwrap();
    assert!(compiled.schedule.tiles.is_empty(), "{}", compiled.schedule);
}

/// On a GPU, a matrix of dense blocks stored entry by entry gets the
/// advice of the block format (CSR ran 20–30x slower than BlockGroupCOO on
/// the H100); scattered entries, a block format and a product that is not
/// sparse times dense do not.
#[test]
fn dense_blocks_stored_entry_by_entry_get_the_block_format_advice() {
    let matrix = |entries: Vec<(i64, i64)>| {
        let val = (0..entries.len()).map(|k| 0.5 + (k % 7) as f64 / 8.0).collect();
        let crd = vec![entries.iter().map(|e| e.0).collect(), entries.iter().map(|e| e.1).collect()];
        Coo::<f64, i64>::new(vec![96, 64], crd, val).unwrap()
    };
    // Blocks (0,1) and (2,0) of 32x32 full, and one stray entry: 2049
    // entries in the 3 blocks they touch, 67%.
    let mut entries: Vec<(i64, i64)> = Vec::new();
    for (bi, bj) in [(0, 1), (2, 0)] {
        for r in 0..32 {
            entries.extend((0..32).map(|c| (bi * 32 + r, bj * 32 + c)));
        }
    }
    entries.push((40, 50));
    let blocks = matrix(entries);
    let problem = |a: &Coo<f64, i64>, format: &str, dtype: DType| {
        Problem::new("C[m,n] += A[m,k] * B[k,n]")
            .tensor("A", a.clone())
            .dtype("A", ElemType::Value(dtype))
            .tensor("B", Input::random(&[64, 8], dtype, 2))
            .format("A", format)
    };
    let advice = problem(&blocks, "csr", DType::F16).prepare().unwrap().block_format_advice().unwrap();
    assert!(advice.contains("fill 67% of the 32×32 blocks"), "{advice}");
    assert!(advice.contains("--format A=blockgroupcoo:bm=32,bk=32") && !advice.contains("tf32"), "{advice}");
    let f32 = problem(&blocks, "coo", DType::F32).prepare().unwrap().block_format_advice().unwrap();
    assert!(f32.contains("tf32=on"), "{f32}");
    let block_format = problem(&blocks, "blockgroupcoo:bm=32,bk=32", DType::F16).prepare().unwrap();
    assert_eq!(block_format.block_format_advice(), None);
    // Scattered entries: three in a block.
    let scattered = matrix((0..96).map(|i| (i, (i * 7) % 64)).collect());
    assert_eq!(problem(&scattered, "csr", DType::F16).prepare().unwrap().block_format_advice(), None);
    // The same entries, each given 40 times (a non-canonical COO): the
    // duplicates are summed, not counted as fill (3,840 of 6,144 places).
    let repeated = matrix((0..96 * 40).map(|k| (k % 96, ((k % 96) * 7) % 64)).collect());
    assert_eq!(problem(&repeated, "coo", DType::F16).prepare().unwrap().block_format_advice(), None);
    // A matrix-vector product has no Tensor Core kernel.
    let spmv = Problem::new("y[m] = A[m,k] * x[k]")
        .tensor("A", blocks.clone())
        .dtype("A", ElemType::Value(DType::F16))
        .tensor("x", Input::random(&[64], DType::F16, 2))
        .format("A", "csr");
    assert_eq!(spmv.prepare().unwrap().block_format_advice(), None);
    // Nor does A read inside a function: the rewrite refuses a block
    // format there (its padding would go through the function).
    let relu = Problem::new("C[m,n] = relu(A[m,k]) * B[k,n]")
        .tensor("A", blocks.clone())
        .dtype("A", ElemType::Value(DType::F16))
        .tensor("B", Input::random(&[64, 8], DType::F16, 2))
        .format("A", "coo");
    assert_eq!(relu.prepare().unwrap().block_format_advice(), None);
}

/// A literal zero divisor divides by zero on the level path: it was taken
/// for a zero factor, the loop body dropped, and every row read 0 (the tile
/// path and the reference gave inf and NaN).
#[test]
fn a_literal_zero_divisor_is_no_zero_factor() {
    let backend = CBackend::new();
    let prepared = Problem::new("y[i] = A[i,j] * x[j] / 0")
        .tensor("A", Input::random(&[6, 5], DType::F32, 1))
        .tensor("x", Input::random(&[5], DType::F32, 2))
        .format("A", "csr")
        .prepare()
        .unwrap();
    for path in ["path=levels", "path=tiles"] {
        let (out, check) = prepared.compile(&backend, &path.parse().unwrap()).unwrap().check().unwrap();
        assert!(check.passed(), "{path}: {check:?}");
        assert!(out.iter().all(|y| !y.is_finite()), "{path}: {out:?}");
    }
}

/// ELL with one long row stores every row padded to it: a note says so
/// before anything runs, and names CSR. Not for CSR, nor for an ELL whose
/// rows are even.
#[test]
fn ell_padded_far_past_its_entries_gets_a_note() {
    let rows = 2048i64;
    let mut entries: Vec<(i64, i64)> = (0..rows).map(|i| (i, i)).collect();
    // Row 7: its diagonal and 1022 more (1023 distinct).
    entries.extend((1..1024).map(|j| (7, j)));
    let crd = vec![entries.iter().map(|e| e.0).collect(), entries.iter().map(|e| e.1).collect()];
    let val = vec![1.0; entries.len()];
    let skewed = Coo::<f64, i64>::new(vec![rows as usize, rows as usize], crd, val).unwrap();
    let advice = |a: &Coo<f64, i64>, format: &str| {
        Problem::new("y[i] = A[i,j] * x[j]")
            .tensor("A", a.clone())
            .tensor("x", Input::random(&[rows as usize], DType::F32, 2))
            .format("A", format)
            .prepare()
            .unwrap()
            .padding_advice()
    };
    let note = advice(&skewed, "ell").expect("a note");
    assert!(
        note.contains(
            "pads each of its 2048 rows to the longest (1023 entries): 2095104 values stored for 3070 entries"
        ),
        "{note}"
    );
    assert!(note.contains("--format A=csr"), "{note}");
    assert_eq!(advice(&skewed, "csr"), None);
    let diagonal = Coo::<f64, i64>::new(
        vec![rows as usize, rows as usize],
        vec![(0..rows).collect(), (0..rows).collect()],
        vec![1.0; rows as usize],
    )
    .unwrap();
    assert_eq!(advice(&diagonal, "ell"), None);
}

/// A sparse output too big for its format's per-row positions is refused
/// with the formats that keep positions for non-empty rows only (it listed
/// the formats that assemble, CSR among them); DCSR compiles.
#[test]
fn a_sparse_output_too_big_for_csr_names_dcsr() {
    let backend = CBackend::new();
    let wide = Coo::<f64, i64>::new(
        vec![3, 3_000_000_000],
        vec![vec![0, 1], vec![0, 2_999_999_998]],
        vec![1.0, 2.0],
    )
    .unwrap();
    let transpose = |format: &str| -> Result<(), Error> {
        let prepared = Problem::new("C[j,i] = A[i,j]")
            .tensor("A", wide.clone())
            .format("A", "csr")
            .format("C", format)
            .prepare()?;
        prepared.compile(&backend, &Schedule::default())?;
        Ok(())
    };
    let Err(Error::Statement { diagnostic, .. }) = transpose("csr") else {
        panic!("CSR's pos cannot be allocated")
    };
    assert!(diagnostic.message.contains("exceed the 4 GiB limit"), "{diagnostic:?}");
    assert!(diagnostic.notes[0].starts_with("dcsr and dcsc"), "{diagnostic:?}");
    transpose("dcsr").unwrap();
}

/// An integer tensor read as a value promotes an f32 operand's product to
/// f64, as NumPy does, and every path computes it so: the C level path
/// multiplied an int64 by a float in float (2 * 16777217 + 3 came out
/// 33554435, inside f32's check tolerance).
#[test]
fn an_integer_value_operand_makes_an_exact_f64_output() {
    let backend = CBackend::new();
    let a =
        Coo::<f64, i64>::new(vec![3, 3], vec![vec![0, 0, 2], vec![0, 1, 2]], vec![2.0, 3.0, 5.0]).unwrap();
    let x = ndarray::arr1(&[16_777_217i64, 1, 1]);
    let prepared = Problem::new("y[i] = A[i,j] * x[j]")
        .tensor("A", a)
        .dtype("A", ElemType::Value(DType::F32))
        .tensor("x", Input::indices(x))
        .format("A", "csr")
        .prepare()
        .unwrap();
    assert_eq!(prepared.einsum.output().dtype, ElemType::Value(DType::F64));
    for path in ["path=levels", "path=tiles"] {
        let y = prepared.compile(&backend, &path.parse().unwrap()).unwrap().run().unwrap();
        assert_eq!(y.iter().copied().collect::<Vec<_>>(), [33_554_437.0, 0.0, 5.0], "{path}");
    }
}

/// A user's tensor named as a format's array (`A_val` beside `A` in CSR,
/// `C_val` beside a sparse output `C`) keeps its data: the level path read
/// A's values in its place (s = 24336 for 1886040 on karate) and the tile
/// path refused the statement.
#[test]
fn a_tensor_named_as_a_formats_array_keeps_its_data() {
    let backend = CBackend::new();
    let prepared = Problem::new("y[i] = A[i,j] * x[j] * A_val[j]")
        .tensor("A", Input::random(&[6, 5], DType::F32, 1))
        .tensor("x", Input::random(&[5], DType::F32, 2))
        .tensor("A_val", Input::random(&[5], DType::F32, 3))
        .format("A", "csr")
        .prepare()
        .unwrap();
    for path in ["path=levels", "path=tiles"] {
        let (_, check) = prepared.compile(&backend, &path.parse().unwrap()).unwrap().check().unwrap();
        assert!(check.passed(), "{path}: {check:?}");
    }
    let sparse_output = Problem::new("C[i,j] = A[i,j] * C_val[i,j]")
        .tensor("A", Input::random(&[6, 5], DType::F32, 1))
        .tensor("C_val", Input::random(&[6, 5], DType::F32, 4))
        .format("A", "csr")
        .format("C", "csr")
        .prepare()
        .unwrap();
    let (_, check) = sparse_output.compile(&backend, &Schedule::default()).unwrap().check().unwrap();
    assert!(check.passed(), "{check:?}");
}

/// A temporary is computed alike under every fusion and on every backend:
/// statements run apart (fusion=none on the emulated GPU) wrote it in the
/// dtype its shape gave it (f16 here; the command line's default is f32)
/// where the program kernels hold it in f64, the inputs' type. A dtype
/// said for a temporary, other than that, is refused: no fusion keeps it.
#[test]
fn a_temporary_is_computed_alike_under_every_fusion() {
    use spindle::Backend;
    let a: Coo<f64, i64> = spindle_formats::generate::uniform(33, 33, 150, 1).unwrap();
    let problem = Problem::new("y[i] = A[i,j] * x[j]; z[i] = y[i] * w[i]")
        .tensor("A", a)
        .format("A", "csr")
        .tensor("x", Input::random(&[33], DType::F64, 2))
        .tensor("w", Input::random(&[33], DType::F64, 3))
        .tensor("y", Input::shape(&[33], ElemType::Value(DType::F16)));
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let (c, emulate) = (CBackend::new(), spindle::EmulateBackend::from_env());
    let mut results: Vec<(String, ArrayD<f64>)> = Vec::new();
    for fusion in ["none", "trie", "maximal"] {
        let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
        for backend in [&c as &dyn Backend, &emulate] {
            let run = problem.run_program(backend, &schedule, opts, true).unwrap();
            assert!(run.checks.iter().all(|c| c.passed()), "{fusion} on {}", backend.device());
            results.push((format!("{fusion} on {}", backend.device()), run.result));
        }
    }
    let (first, want) = &results[0];
    for (name, got) in &results[1..] {
        let diff = got.iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
        assert!(diff <= 1e-12, "{name} differs from {first} by {diff}");
    }
    let f16 = ElemType::Value(DType::F16);
    let err = problem.clone().dtype("y", f16).program().unwrap_err().render(false);
    assert!(err.contains("`y` is a temporary") && err.contains("the dtype f16"), "{err}");
    let text = "y[i] = A[i,j] * x[j] where y: f16; z[i] = y[i] * w[i]";
    let whered = Problem::new(text)
        .tensor("A", spindle_formats::generate::uniform::<f64, i64>(33, 33, 150, 1).unwrap())
        .format("A", "csr")
        .tensor("x", Input::random(&[33], DType::F64, 2))
        .tensor("w", Input::random(&[33], DType::F64, 3));
    let err = whered.program().unwrap_err().render(false);
    assert!(err.contains("`y` is a temporary") && err.contains("f64"), "{err}");
    // The dtype it is held in is no contradiction.
    assert!(problem.dtype("y", ElemType::Value(DType::F64)).program().is_ok());
}

/// A format given to a temporary is refused under every fusion and on
/// every target, pointing at the statement that writes it (C refused it
/// under none and trie, the GPU's none blamed a sparse output, and trie on
/// the GPU and maximal everywhere dropped it silently).
#[test]
fn a_format_on_a_temporary_is_refused_under_every_fusion() {
    use spindle::Backend;
    let sparse = |seed| spindle_formats::generate::uniform::<f64, i64>(12, 12, 30, seed).unwrap();
    let problem = Problem::new("C[i,j] = A[i,j] + B[i,j]; z[i] = C[i,j] * x[j]")
        .tensor("A", sparse(1))
        .tensor("B", sparse(2))
        .format("A", "csr")
        .format("B", "csr")
        .format("C", "csr")
        .tensor("x", Input::random(&[12], DType::F64, 3));
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let (c, emulate) = (CBackend::new(), spindle::EmulateBackend::from_env());
    for fusion in ["none", "trie", "maximal"] {
        let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
        for backend in [&c as &dyn Backend, &emulate] {
            let err = problem.run_program(backend, &schedule, opts, true).unwrap_err().render(false);
            assert!(
                err.contains("`C` is a temporary")
                    && err.contains("has a format")
                    && err.contains("C[i,j] ="),
                "{fusion} on {}: {err}",
                backend.device()
            );
        }
    }
}

/// A refusal that quotes the name of an earlier version of a tensor
/// written again (`t_1`) says whose version it is: the user wrote `t`.
#[test]
fn a_refusal_quoting_a_version_says_whose_it_is() {
    let problem = Problem::new("t[i] = A[i,j] * x[j]; t[i] = t[i] * w[i] + t[i]")
        .tensor("A", spindle_formats::generate::uniform::<f64, i64>(12, 12, 30, 1).unwrap())
        .format("A", "csr")
        .tensor("x", Input::random(&[12], DType::F64, 2))
        .tensor("w", Input::random(&[12], DType::F64, 3));
    let maximal: Schedule = "fusion=maximal".parse().unwrap();
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let ran = problem.run_program(&CBackend::new(), &maximal, opts, false).unwrap_err().render(false);
    let compiled = problem.program_kernel(&maximal, spindle::Target::C).unwrap_err().render(false);
    for err in [ran, compiled] {
        assert!(
            err.contains("cannot substitute `t_1`")
                && err.contains("`t_1` is `t` as statement 1 writes it: statement 2 writes `t` again"),
            "{err}"
        );
    }
    // Under trie it runs, and the split shows the version.
    let trie: Schedule = "fusion=trie".parse().unwrap();
    assert!(problem.run_program(&CBackend::new(), &trie, opts, true).unwrap().checks[0].passed());
}

/// A temporary written twice (`T = x; T += A*x`) runs on C as each
/// statement's own kernel, as on the GPU; the program kernel refused it.
#[test]
fn a_temporary_written_twice_runs_its_statements_apart_on_c() {
    let a: Coo<f64, i64> = spindle_formats::generate::uniform(20, 20, 60, 4).unwrap();
    let dense = a.to_ndarray().unwrap();
    let x = ArrayD::from_shape_fn(vec![20], |i| 0.1 + 0.03 * i[0] as f64);
    let w = ArrayD::from_shape_fn(vec![20], |i| 1.0 - 0.07 * i[0] as f64);
    let problem = Problem::new("T[i] = x[i]; T[i] += A[i,j] * x[j]; z[i] = T[i] * w[i]")
        .tensor("A", a)
        .format("A", "csr")
        .tensor("x", x.clone())
        .tensor("w", w.clone());
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    for fusion in ["none", "trie"] {
        let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
        let run = problem.run_program(&CBackend::new(), &schedule, opts, true).unwrap();
        assert!(run.checks.iter().all(|c| c.passed()), "{fusion}");
        for i in 0..20 {
            let t = x[[i]] + (0..20).map(|j| dense[[i, j]] * x[[j]]).sum::<f64>();
            assert!((run.result[[i]] - t * w[[i]]).abs() < 1e-12, "{fusion}: z[{i}]");
        }
    }
}

/// On a GPU, one plain product whose output takes its mask's format
/// (`S = A .* D`, S and A in CSR, DCSR or COO) runs as a program kernel
/// that holds S in A's pattern, one value per stored entry, a warp per row
/// (COO: 32 entries, a lane each, whose positions no other lane stores at), each value
/// stored once with no zeroing first (the emulation starts S at NaN) (the
/// GPU's level path assembles no sparse output: it was refused); on C it stays
/// the level path's assembly. A union, which no operand masks, is still
/// refused, with both reasons.
#[test]
fn a_masked_sparse_output_runs_on_the_emulated_gpu() {
    use spindle::Target;
    let sparse = |seed| spindle_formats::generate::uniform::<f64, i64>(20, 20, 60, seed).unwrap();
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let emulate = spindle::EmulateBackend::from_env();
    for format in ["csr", "dcsr", "coo"] {
        let masked = Problem::new("S[i,j] = A[i,j] * D[i,j]")
            .tensor("A", sparse(1))
            .tensor("D", Input::random(&[20, 20], DType::F32, 2))
            .format("A", format)
            .format("S", format);
        assert!(!masked.is_program() && !masked.is_program_on(Target::C));
        assert!(masked.is_program_on(Target::Emulate) && masked.is_program_on(Target::Cuda));
        for fusion in ["trie", "none"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let run = masked.run_program(&emulate, &schedule, opts, true).unwrap();
            assert!(run.checks.iter().all(|c| c.passed()), "{format} {fusion}: {:?}", run.checks);
            assert_eq!(run.checks[0].stored, Some(60), "{format}: one value per entry of A");
            assert!(run.result.iter().any(|x| *x != 0.0));
            assert!(run.sources[0].contains("t_S[p_A1] = "), "{}", run.sources[0]);
            // COO: 32 entries a warp, a lane each.
            let lanes = run.sources[0].contains("p_A0_step = 0 + warp * 32;");
            assert_eq!(lanes, format == "coo", "{}", run.sources[0]);
        }
    }
    // `+=` into a sparse S given data is refused on the GPU as on C (it
    // ran as the masked program kernel, which dropped S's entries).
    let given = Problem::new("S[i,j] += A[i,j] * D[i,j]")
        .tensor("A", sparse(1))
        .tensor("D", Input::random(&[20, 20], DType::F32, 2))
        .tensor("S", sparse(1))
        .format("A", "csr")
        .format("S", "csr");
    assert!(!given.is_program_on(Target::Emulate));
    let text = match given.prepare() {
        Err(e) => e.render(false),
        Ok(p) => match p.compile(&emulate, &Schedule::default()) {
            Err(e) => e.render(false),
            Ok(_) => panic!("+= into a sparse S given data compiled"),
        },
    };
    assert!(text.contains("a sparse output is assembled from nothing"), "{text}");
    let union = Problem::new("S[i,j] = A[i,j] + B[i,j]")
        .tensor("A", sparse(1))
        .tensor("B", sparse(2))
        .format("A", "csr")
        .format("B", "csr")
        .format("S", "csr");
    assert!(union.is_program_on(Target::Emulate));
    let err = union.run_program(&emulate, &Schedule::default(), opts, false).unwrap_err().to_string();
    assert!(err.contains("sparse outputs are assembled on the C backend only"), "{err}");
    // (Where an operand in another format masks the output, the fix.)
    assert!(err.contains("store it in that operand's format"), "{err}");
    assert!(
        err.contains("in the pattern of an operand that masks it") && err.contains("none does here"),
        "{err}"
    );
}

/// SDDMM's sparse output (`S[i,j] = A[i,j] * U[i,k] * V[j,k]`, S and A in
/// CSR) runs on the emulated GPU under every fusion, held in A's pattern
/// (it was refused under `none` and `maximal`, and at K = 1, where
/// input-sensitive fusion substitutes the statements into one: the plain
/// statement's level kernel assembles no sparse output). `none` runs the
/// dot products as their own kernel, then the masked product; `maximal`
/// the substituted statement's program kernel, which `compile` prints as
/// CUDA too. A statement no operand masks is refused under `none` saying
/// which fusions run it.
#[test]
fn sddmm_with_a_sparse_output_runs_on_the_emulated_gpu_under_every_fusion() {
    use spindle::Target;
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let emulate = spindle::EmulateBackend::from_env();
    let a = spindle_formats::generate::uniform::<f64, i64>(20, 12, 60, 1).unwrap();
    for k in [1, 8] {
        let sddmm = Problem::new("S[i,j] = A[i,j] * U[i,k] * V[j,k]")
            .tensor("A", a.clone())
            .tensor("U", Input::random(&[20, k], DType::F32, 2))
            .tensor("V", Input::random(&[12, k], DType::F32, 3))
            .format("A", "csr")
            .format("S", "csr");
        for fusion in ["none", "maximal", "trie"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let run = sddmm.run_program(&emulate, &schedule, opts, true).unwrap();
            let last = run.sources.last().unwrap();
            assert!(run.checks.iter().all(|c| c.passed()), "K={k} {fusion}: {:?}", run.checks);
            assert_eq!(
                run.checks.last().unwrap().stored,
                Some(60),
                "K={k} {fusion}: one value per entry of A"
            );
            assert!(run.result.iter().any(|x| *x != 0.0));
            assert!(last.contains("t_S[p_A1]"), "K={k} {fusion}: {last}");
            assert_eq!(run.sources.len(), if fusion == "none" { 2 } else { 1 }, "K={k} {fusion}");
            assert!(!run.notes.iter().any(|n| n.contains("zeros included")), "{:?}", run.notes);
            let (lowered, _) = sddmm.program_kernel(&schedule, Target::Cuda).unwrap();
            if fusion != "none" {
                spindle::print_levels_cuda(&lowered.kernel).unwrap();
            }
        }
    }
    let unmasked = Problem::new("S[i,j] = A[i,j] * D[i,j] * 2")
        .tensor("A", a)
        .tensor("D", Input::random(&[20, 12], DType::F32, 2))
        .format("A", "csr")
        .format("S", "csr");
    let none: Schedule = "fusion=none".parse().unwrap();
    let err = unmasked.run_program(&emulate, &none, opts, false).unwrap_err().to_string();
    assert!(
        err.contains("the last, `S[i,j] = T1[i,j] * 2`, writes the sparse output `S`")
            && err.contains("fusion=trie (the default) and maximal run them as one kernel"),
        "{err}"
    );
}

/// A sum whose terms share a mask (`S = A*D + A*E`, `S = A*D + A`) into a
/// sparse S in A's format runs on the emulated GPU under every fusion,
/// held in A's pattern: the sum is zero wherever A is, so it walks A (it
/// was refused, saying no operand masked S).
#[test]
fn sums_whose_terms_share_a_mask_run_on_the_emulated_gpu_into_its_pattern() {
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let emulate = spindle::EmulateBackend::from_env();
    let a = spindle_formats::generate::uniform::<f64, i64>(20, 12, 60, 1).unwrap();
    for statement in ["S[i,j] = A[i,j] * D[i,j] + A[i,j] * E[i,j]", "S[i,j] = A[i,j] * D[i,j] - A[i,j]"] {
        let mut p = Problem::new(statement)
            .tensor("A", a.clone())
            .tensor("D", Input::random(&[20, 12], DType::F32, 2))
            .format("A", "csr")
            .format("S", "csr");
        if statement.contains("E[") {
            p = p.tensor("E", Input::random(&[20, 12], DType::F32, 3));
        }
        for fusion in ["none", "maximal", "trie"] {
            let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
            let run = p
                .run_program(&emulate, &schedule, opts, true)
                .unwrap_or_else(|e| panic!("{statement} {fusion}: {e}"));
            assert!(run.checks.iter().all(|c| c.passed()), "{statement} {fusion}: {:?}", run.checks);
            assert_eq!(
                run.checks.last().unwrap().stored,
                Some(60),
                "{statement} {fusion}: one value per entry of A"
            );
            assert!(run.result.iter().any(|x| *x != 0.0));
            assert!(
                run.sources.last().unwrap().contains("t_S[p_A1]"),
                "{statement} {fusion}: {:?}",
                run.sources
            );
        }
    }
}

/// A product of two stored operands in one program kernel on the GPU (the
/// masks of SDDMM with two, `S = A*B*(U*V)`; `y = A*B*x`): the loop walks
/// A and each statement reading B searches B's row for the entry,
/// skipping the statement where there is none; the sparse S held in A's
/// pattern (such programs were refused on the GPU: a program kernel
/// walked one sparse operand per loop, and the level path assembles no
/// sparse output there). On C, where a merge co-iterates faster, trie
/// runs the statements substituted into one, saying why. A statement that
/// is not zero without B is refused saying so.
#[test]
fn a_second_stored_operand_of_a_product_is_searched_in_a_program_kernel() {
    let opts = TimingOptions { warmup: 0, repeats: 1 };
    let emulate = spindle::EmulateBackend::from_env();
    let backends: [(&dyn spindle::Backend, bool); 2] = [(&CBackend::new(), false), (&emulate, true)];
    let a = spindle_formats::generate::uniform::<f64, i64>(20, 12, 60, 1).unwrap();
    let b = spindle_formats::generate::uniform::<f64, i64>(20, 12, 90, 2).unwrap();
    let two = |statement: &str| {
        Problem::new(statement)
            .tensor("A", a.clone())
            .tensor("B", b.clone())
            .format("A", "csr")
            .format("B", "csr")
    };
    let sddmm = two("S[i,j] = A[i,j] * B[i,j] * (U[i,k] * V[k,j])")
        .tensor("U", Input::random(&[20, 4], DType::F32, 3))
        .tensor("V", Input::random(&[4, 12], DType::F32, 4))
        .format("S", "csr");
    let masked = two("S[i,j] = A[i,j] * B[i,j] * D[i,j]")
        .tensor("D", Input::random(&[20, 12], DType::F32, 3))
        .format("S", "csr");
    let spmv = two("y[i] = A[i,j] * B[i,j] * x[j]").tensor("x", Input::random(&[12], DType::F32, 3));
    for (backend, gpu) in backends {
        for (p, sparse) in [(&sddmm, true), (&masked, true), (&spmv, false)] {
            for fusion in ["maximal", "trie"] {
                let schedule: Schedule = format!("fusion={fusion}").parse().unwrap();
                let run =
                    p.run_program(backend, &schedule, opts, true).unwrap_or_else(|e| panic!("{fusion}: {e}"));
                let last = run.sources.last().unwrap();
                assert!(run.checks.iter().all(|c| c.passed()), "{fusion}: {:?}", run.checks);
                assert!(run.result.iter().any(|x| *x != 0.0));
                // The C backend's level path merges A and B (assembling S
                // over the intersection).
                if !gpu {
                    assert!(!last.contains("SPINDLE_LOWER_BOUND"), "{fusion}: {last}");
                    if fusion == "trie" {
                        assert!(
                            run.notes.iter().any(|n| n.contains("on CPUs the level path's merge")),
                            "{:?}",
                            run.notes
                        );
                    }
                    continue;
                }
                // Substituted into one statement, `maximal`, the GPU's
                // program kernel searches B once an entry of A, around the
                // sum over k (not once per k).
                if fusion == "maximal" {
                    let kernel = run.kernels.last().unwrap();
                    if std::ptr::eq(p, &sddmm) {
                        let (find, k) = (kernel.find("find pB1"), kernel.find("for k"));
                        assert!(find.is_some() && find < k, "{kernel}");
                    }
                    continue;
                }
                assert!(last.contains("SPINDLE_LOWER_BOUND(t_B_crd"), "{fusion}: {last}");
                if sparse {
                    assert_eq!(
                        run.checks.last().unwrap().stored,
                        Some(60),
                        "{fusion}: one value per entry of A"
                    );
                    assert!(last.contains("t_S[p_A1]"), "{fusion}: {last}");
                }
            }
        }
    }
    let summed = two("S[i,j] = A[i,j] * (B[i,j] + D[i,j])")
        .tensor("D", Input::random(&[20, 12], DType::F32, 3))
        .format("S", "csr");
    let trie: Schedule = "fusion=trie".parse().unwrap();
    let err = summed.run_program(&emulate, &trie, opts, false).unwrap_err().to_string();
    assert!(err.contains("so the statement must be zero without `B`"), "{err}");
}

/// `reduce=parallel` over CSR on the tile path, whose rewritten statement
/// sums nothing: the notes say so of that statement, where its rows meet
/// instead, and which operand's rows the level path splits (they said every
/// index was on the left, which the statement as written belies, and split
/// "each row of" the whole statement).
#[test]
fn reduce_parallel_over_a_rewritten_spmm_says_what_sums_where() {
    let prepared = Problem::new("C[m,n] += A[m,k] * B[k,n]")
        .tensor("A", spindle_formats::generate::uniform::<f64, i64>(12, 9, 30, 1).unwrap())
        .tensor("B", Input::random(&[9, 4], DType::F32, 2))
        .format("A", "csr")
        .prepare()
        .unwrap();
    let err = prepared.lower(&"reduce=parallel(4)".parse().unwrap()).unwrap_err().render(false);
    assert!(
        err.contains("no index of it is summed")
            && err.contains("reduce=segment(R) groups them")
            && err.contains("splits each row of `A` over 4 lanes"),
        "{err}"
    );
}
