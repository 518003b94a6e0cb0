//! Sparse convolution through subsection loops (`spindle-conv`): the Rust
//! executor against the reference evaluator in every loop order of
//! convolutions in one to three dimensions, with strides, dilations and
//! intercepts, over every sorted format (illegal orders refused with the
//! reason); the printed C against the executor on one and two threads.

use std::collections::BTreeMap;

use ndarray::ArrayD;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_c::Compiler;
use spindle_c::level::CLevelKernel;
use spindle_conv::{execute, lower};
use spindle_formats::{Coo, FormatSpec};
use spindle_ir::eval::evaluate;
use spindle_ir::kernel::schedule::Schedule;
use spindle_ir::lang::{Einsum, check, declarations, parse};
use spindle_ir::tensor::{TensorValue, Tensors};
use spindle_tests::random_sparse;

fn dense(shape: &[usize], rng: &mut ChaCha8Rng) -> TensorValue {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    TensorValue::Values(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
}

fn permutations(items: &[String]) -> Vec<Vec<String>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first.clone());
            out.push(p);
        }
    }
    out
}

/// Tensors and their shapes.
type Shapes<'a> = &'a [(&'a str, &'a [usize])];

struct Case {
    einsum: Einsum,
    data: Tensors,
    /// `I`'s entries.
    entries: Coo<f64, i64>,
    /// A second sparse operand's, `J`, where the statement has one.
    second: Option<Coo<f64, i64>>,
    want: ndarray::ArrayD<f64>,
}

/// `statement` over `I` (sparse, `density`) and dense others.
fn case(statement: &str, shapes: Shapes, density: f64, seed: u64) -> Case {
    // (`&str` or `String`.)
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let decl: Vec<(&str, &[usize], &str)> = shapes.iter().map(|(n, s)| (*n, *s, "f64")).collect();
    let einsum = check(&parse(statement).unwrap(), &declarations(&decl)).unwrap();
    let out = einsum.output().name.clone();
    let mut data = Tensors::new();
    let mut entries = None;
    let mut second = None;
    for (name, shape) in shapes {
        if *name == "I" {
            let coo = random_sparse(shape, density, seed);
            data.insert("I".into(), TensorValue::Values(coo.to_ndarray().unwrap()));
            entries = Some(coo);
        } else if *name == "J" {
            let coo = random_sparse(shape, density, seed + 1000);
            data.insert("J".into(), TensorValue::Values(coo.to_ndarray().unwrap()));
            second = Some(coo);
        } else if *name != out {
            data.insert(name.to_string(), dense(shape, &mut rng));
        }
    }
    let want = evaluate(&einsum, &data).unwrap();
    data.remove("I");
    data.remove("J");
    Case { einsum, data, entries: entries.unwrap(), second, want }
}

/// `I` and `J` of a case stored in `fi` and `fj`: the formats and
/// entries [`lower`] takes.
fn stored_i_and_j(
    c: &Case,
    fi: &str,
    fj: &str,
) -> (BTreeMap<String, FormatSpec>, BTreeMap<String, Coo<f64, i64>>) {
    let formats = BTreeMap::from([
        ("I".to_string(), fi.parse::<FormatSpec>().unwrap()),
        ("J".to_string(), fj.parse::<FormatSpec>().unwrap()),
    ]);
    let sparse =
        BTreeMap::from([("I".to_string(), c.entries.clone()), ("J".to_string(), c.second.clone().unwrap())]);
    (formats, sparse)
}

/// The kernel printed as C, compiled and run on one and two threads, gives
/// what the executor gave.
fn agrees_in_c(kernel: &spindle_ir::level::LevelKernel, data: &Tensors, executed: &ArrayD<f64>, what: &str) {
    let compiled = CLevelKernel::compile_with(kernel, &Compiler::from_env(), 0).unwrap();
    for threads in [1, 2] {
        let got = compiled.run(data, threads).unwrap();
        let err = (&got - executed).iter().fold(0.0f64, |m, d| m.max(d.abs()));
        assert!(err < 1e-9, "C on {threads} threads, {what}: {err}\n{}", compiled.source);
    }
}

/// Runs every order of the statement's indices in `format`: the legal ones
/// must match the reference, the others be refused for resolving a level
/// before its parent. Returns (legal, refused).
fn every_order(c: &Case, format: &str, orders: Option<usize>) -> (usize, usize) {
    every_order_on(c, format, orders, false)
}

/// [`every_order`], each legal order also printed as C, compiled and run on
/// one and two threads.
fn every_order_on(c: &Case, format: &str, orders: Option<usize>, in_c: bool) -> (usize, usize) {
    every_order_with(c, format, orders, in_c, &Schedule::default())
}

/// [`every_order_on`] with the schedule's other items from `template`.
fn every_order_with(
    c: &Case,
    format: &str,
    orders: Option<usize>,
    in_c: bool,
    template: &Schedule,
) -> (usize, usize) {
    let spec: FormatSpec = format.parse().unwrap();
    let formats = BTreeMap::from([("I".to_string(), spec)]);
    let sparse = BTreeMap::from([("I".to_string(), c.entries.clone())]);
    let names: Vec<String> = c.einsum.indices.iter().map(|i| i.name.clone()).collect();
    let (mut legal, mut refused) = (0, 0);
    for order in permutations(&names).into_iter().take(orders.unwrap_or(usize::MAX)) {
        let schedule = Schedule { order: order.clone(), ..template.clone() };
        match lower(&c.einsum, &formats, &sparse, &schedule, "conv") {
            Ok(lowered) => {
                let mut data = c.data.clone();
                data.extend(lowered.arrays.clone());
                let got = execute(&lowered.kernel, &data).unwrap();
                let err = (&got - &c.want).iter().fold(0.0f64, |m, d| m.max(d.abs()));
                assert!(
                    err < 1e-9,
                    "{} in {format}, order {order:?}: error {err}\n{}",
                    c.einsum.statement,
                    lowered.kernel
                );
                if in_c {
                    agrees_in_c(&lowered.kernel, &data, &got, &format!("order {order:?}"));
                }
                legal += 1;
            }
            Err(d) => {
                assert_eq!(d.label, spindle_conv::lower::RESOLVED_EARLY, "order {order:?}: {}", d.message);
                refused += 1;
            }
        }
    }
    (legal, refused)
}

#[test]
fn one_dimensional_convolutions_in_every_order_and_format() {
    let shapes: Shapes = &[("O", &[38]), ("I", &[40]), ("F", &[3])];
    for density in [0.0, 0.05, 0.3, 1.0] {
        let c = case("O[i] += I[i+p] * F[p]", shapes, density, 1);
        for format in ["coo", "csf", "d", "c"] {
            assert_eq!(every_order(&c, format, None), (2, 0));
        }
    }
}

#[test]
fn strides_dilations_and_intercepts() {
    let cases: &[(&str, Shapes)] = &[
        ("O[i] += I[2*i+p] * F[p]", &[("O", &[19]), ("I", &[41]), ("F", &[3])]),
        ("O[i] += I[i+2*p] * F[p]", &[("O", &[30]), ("I", &[34]), ("F", &[3])]),
        ("O[i] += I[3*i+2*p+1] * F[p]", &[("O", &[12]), ("I", &[45]), ("F", &[4])]),
        // Zero padding: reads at -1 and past the end are zeros.
        ("O[i] += I[i+p-1] * F[p]", &[("O", &[40]), ("I", &[40]), ("F", &[3])]),
        // An index written twice is one term, `2*p` (it was refused:
        // "indexes two dimensions").
        ("O[i] += I[i+p+p] * F[p]", &[("O", &[30]), ("I", &[34]), ("F", &[3])]),
    ];
    for (statement, shapes) in cases {
        for seed in 0..3 {
            let c = case(statement, shapes, 0.3, seed);
            for format in ["coo", "d", "c"] {
                assert_eq!(every_order(&c, format, None), (2, 0), "{statement}");
            }
        }
    }
}

#[test]
fn a_subscript_of_three_indices_reduces_twice_on_one_dimension() {
    let shapes: Shapes = &[("O", &[30]), ("I", &[36]), ("F", &[3]), ("G", &[5])];
    let c = case("O[i] += I[i+p+r] * F[p] * G[r]", shapes, 0.2, 4);
    for format in ["coo", "c", "d"] {
        assert_eq!(every_order(&c, format, None), (6, 0));
    }
    // An index that cancels is no term of the subscript (it was refused:
    // "coefficient -1"); `p` then sums over F alone.
    let c = case("O[i] += I[i+p-p+r] * F[p] * G[r]", shapes, 0.2, 4);
    for format in ["coo", "c", "d"] {
        assert_eq!(every_order(&c, format, None), (6, 0));
    }
}

#[test]
fn two_dimensional_convolutions_in_every_legal_order() {
    let shapes: Shapes = &[("O", &[14, 12]), ("I", &[16, 14]), ("F", &[3, 3])];
    for (density, seed) in [(0.02, 1), (0.3, 2), (0.9, 3)] {
        let c = case("O[i,j] += I[i+p,j+q] * F[p,q]", shapes, density, seed);
        for format in ["csr", "csc", "dcsr", "dcsc", "coo", "dd", "cd"] {
            let (legal, refused) = every_order(&c, format, None);
            // Of the 24 orders, those binding the last index of the first
            // level's subscript before the second's: half.
            assert_eq!((legal, refused), (12, 12), "{format}");
        }
    }
    let strided: Shapes = &[("O", &[7, 6]), ("I", &[16, 14]), ("F", &[3, 3])];
    let c = case("O[i,j] += I[2*i+p,2*j+q] * F[p,q]", strided, 0.3, 5);
    assert_eq!(every_order(&c, "csr", None), (12, 12));
}

#[test]
fn three_dimensional_convolutions() {
    let shapes: Shapes = &[("O", &[6, 5, 4]), ("I", &[8, 7, 6]), ("F", &[3, 3, 3])];
    let c = case("O[i,j,k] += I[i+p,j+q,k+r] * F[p,q,r]", shapes, 0.1, 6);
    // 720 orders; a level resolves after the one above in 1 of 6 ways.
    assert_eq!(every_order(&c, "csf", None), (120, 600));
    every_order(&c, "coo", Some(100));
}

#[test]
fn channels_and_filters_beside_the_windows() {
    // NHWC: a batch, two windows, input channels and output filters.
    let shapes: Shapes = &[("O", &[2, 5, 4, 3]), ("I", &[2, 7, 6, 4]), ("F", &[3, 3, 4, 3])];
    let c = case("O[n,h,w,f] += I[n,h+r,w+q,c] * F[r,q,c,f]", shapes, 0.3, 7);
    for format in ["dddc", "dccc", "csf", "cdcd"] {
        let (legal, _) = every_order(&c, format, Some(240));
        assert!(legal > 0, "{format}");
    }
    every_order(&c, "coo", Some(60));
}

#[test]
fn printed_c_agrees_with_the_executor_on_one_and_two_threads() {
    let one: &[(&str, Shapes)] = &[
        ("O[i] += I[i+p] * F[p]", &[("O", &[38]), ("I", &[40]), ("F", &[3])]),
        ("O[i] += I[3*i+2*p+1] * F[p]", &[("O", &[12]), ("I", &[45]), ("F", &[4])]),
        ("O[i] += I[i+p+r] * F[p] * G[r]", &[("O", &[30]), ("I", &[36]), ("F", &[3]), ("G", &[5])]),
    ];
    for (statement, shapes) in one {
        let c = case(statement, shapes, 0.2, 11);
        for format in ["coo", "c", "d"] {
            assert!(every_order_on(&c, format, None, true).0 > 0);
        }
    }
    let shapes: Shapes = &[("O", &[14, 12]), ("I", &[16, 14]), ("F", &[3, 3])];
    let c = case("O[i,j] += I[i+p,j+q] * F[p,q]", shapes, 0.2, 12);
    assert_eq!(every_order_on(&c, "csr", None, true), (12, 12));
    assert_eq!(every_order_on(&c, "dcsc", Some(12), true).0, 6);
    let strided: Shapes = &[("O", &[7, 6]), ("I", &[16, 14]), ("F", &[3, 3])];
    let c = case("O[i,j] = I[2*i+p,2*j+q-1] * F[p,q]", strided, 0.3, 13);
    every_order_on(&c, "dcsr", Some(8), true);
    let cube: Shapes = &[("O", &[6, 5, 4]), ("I", &[8, 7, 6]), ("F", &[3, 3, 3])];
    let c = case("O[i,j,k] += I[i+p,j+q,k+r] * F[p,q,r]", cube, 0.1, 14);
    assert!(every_order_on(&c, "csf", Some(30), true).0 > 0);
    let nhwc: Shapes = &[("O", &[2, 5, 4, 3]), ("I", &[2, 7, 6, 4]), ("F", &[3, 3, 4, 3])];
    let c = case("O[n,h,w,f] += I[n,h+r,w+q,c] * F[r,q,c,f]", nhwc, 0.3, 15);
    for format in ["dddc", "dccc"] {
        assert!(every_order_on(&c, format, Some(12), true).0 > 0, "{format}");
    }
}

/// An index of extent 0 (an output with no rows, a filter with no taps)
/// runs no loop: the printed C divided by zero and took an extent minus one
/// of 0 on two threads (a panic while printing).
#[test]
fn empty_iteration_spaces_run_no_loop() {
    let cases: &[(&str, Shapes)] = &[
        ("O[i,j] = I[i+p,j+q] * F[p,q]", &[("O", &[0, 0]), ("I", &[2, 2]), ("F", &[3, 3])]),
        ("O[i,j] += I[i+p,j+q] * F[p,q]", &[("O", &[0, 3]), ("I", &[2, 5]), ("F", &[3, 3])]),
        ("O[i,j] += I[i+p,j+q] * F[p,q]", &[("O", &[4, 4]), ("I", &[4, 4]), ("F", &[0, 0])]),
    ];
    for (statement, shapes) in cases {
        let c = case(statement, shapes, 0.5, 16);
        for format in ["csr", "dcsr"] {
            assert!(every_order_on(&c, format, Some(4), true).0 > 0, "{statement} {format}");
        }
    }
}

#[test]
fn dense_outer_loops_search_their_windows_instead() {
    // `subsect=off`: TACO-UCF's strategy, kept to compare against.
    let off: Schedule = "subsect=off".parse().unwrap();
    let shapes: Shapes = &[("O", &[14, 12]), ("I", &[16, 14]), ("F", &[3, 3])];
    let c = case("O[i,j] += I[i+p,j+q] * F[p,q]", shapes, 0.2, 21);
    assert_eq!(every_order_with(&c, "dcsr", None, false, &off), (12, 12));
    assert_eq!(every_order_with(&c, "csr", Some(6), true, &off).0, 4);
    let strided: Shapes = &[("O", &[12]), ("I", &[45]), ("F", &[4])];
    let c = case("O[i] += I[3*i+2*p+1] * F[p]", strided, 0.3, 22);
    assert_eq!(every_order_with(&c, "coo", None, true, &off), (2, 0));
}

#[test]
fn kernel_maps_by_subsection_iteration_match_the_hash_table() {
    for (shape, density, seed) in
        [([6, 7, 5], 0.3, 31), ([1, 1, 40], 0.5, 32), ([12, 3, 9], 0.05, 33), ([4, 4, 4], 1.0, 34)]
    {
        let grid = random_sparse(&shape, density, seed);
        for kernel in [1, 3, 5] {
            let want = spindle_formats::generate::kernel_map(&grid, kernel).unwrap();
            let got = spindle_conv::kernel_map(&grid, kernel).unwrap();
            assert_eq!(got, want, "{shape:?} at {density}, kernel {kernel}");
        }
    }
    assert!(spindle_conv::kernel_map(&random_sparse(&[3, 3, 3], 0.5, 1), 2).is_err());
    // The bunny, voxelized as the point-cloud notebook does.
    let Some(file) = spindle_formats::data::shared_file("pointclouds/bunny.xyz") else {
        eprintln!("skipped: ../shared/data/pointclouds/bunny.xyz not found");
        return;
    };
    let points = spindle_formats::io::read_xyz(&file).unwrap();
    let voxels: Coo<f64, i64> = spindle_formats::generate::voxelize(&points, 0.05).unwrap();
    let want = spindle_formats::generate::kernel_map(&voxels, 3).unwrap();
    assert_eq!(spindle_conv::kernel_map(&voxels, 3).unwrap(), want);
}

/// The plain command's point-cloud layer: `--tensor Map=kernelmap:FILE:...`
/// builds the map from an `.xyz` file by subsection iteration, and the
/// three-factor product over Map in GroupCOO runs as Insum's one grouped
/// kernel (not as a program of two), checked against the reference
/// evaluator; malformed specs are refused with the reason.
#[test]
fn a_point_cloud_layer_runs_from_its_xyz_file() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let text: String = (0..300)
        .map(|_| {
            let [x, y, z]: [f64; 3] = std::array::from_fn(|_| rng.random_range(0.0..1.0));
            format!("{x} {y} {z:.3}\n")
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("spindle-cloud-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cloud.xyz");
    std::fs::write(&file, text).unwrap();
    let spec = format!("{}:voxel=0.2", file.display());
    let map = spindle::input::kernel_map(&spec).unwrap();
    let points = spindle_formats::io::read_xyz(&file).unwrap();
    let voxels: Coo<f64, i64> = spindle_formats::generate::voxelize(&points, 0.2).unwrap();
    assert_eq!(map, spindle_conv::kernel_map(&voxels, 3).unwrap());
    let five = spindle::input::kernel_map(&format!("{spec},kernel=5")).unwrap();
    assert_eq!(five, spindle_conv::kernel_map(&voxels, 5).unwrap());
    for (bad, why) in [
        ("nothing.xyz", "no options after the file"),
        ("nothing.xyz:kernel=3", "the voxel size is missing"),
        ("nothing.xyz:voxel=-1", "voxel=-1 is not a positive number"),
        ("nothing.xyz:voxel=0.1,kernel=4", "kernel=4 is not an odd number"),
        ("nothing.xyz:voxel=0.1,size=2", "`size=2` is not voxel=V or kernel=K"),
    ] {
        let err = spindle::input::kernel_map(bad).unwrap_err().to_string();
        assert!(err.contains(why), "{bad}: {err}");
    }

    let voxels = map.shape[0];
    let f32 = spindle::ElemType::Value(spindle_formats::DType::F32);
    let layer = spindle::Problem::new("Out[x,m] += Map[x,y,z] * In[y,c] * W[z,c,m]")
        .tensor("Map", spindle::Input::file(format!("kernelmap:{spec}")))
        .tensor("In", spindle::Input::random(&[voxels, 8], spindle_formats::DType::F32, 1))
        .tensor("W", spindle::Input::random(&[27, 8, 4], spindle_formats::DType::F32, 2))
        .tensor("Out", spindle::Input::shape(&[voxels, 4], f32))
        .format("Map", "groupcoo:dim=2,g=auto");
    assert!(!layer.is_program(), "a product over GroupCOO alone is one Insum kernel");
    let prepared = layer.prepare().unwrap_or_else(|e| panic!("{}", e.render(false)));
    assert!(prepared.text.contains("Map_grp[p]"), "{}", prepared.text);
    let compiled = prepared.compile(&spindle::CBackend::new(), &Schedule::default()).unwrap();
    let (_, check) = compiled.check().unwrap();
    assert!(check.max_rel_error <= check.tolerance, "error {:.2e}", check.max_rel_error);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pooling_folds_in_the_zeros_its_windows_skip() {
    let shapes: Shapes = &[("O", &[8, 8]), ("I", &[15, 15])];
    for (op, density, seed) in [("max=", 0.3, 41), ("min=", 0.3, 42), ("max=", 1.0, 43), ("max=", 0.02, 44)] {
        let statement = format!("O[i,j] {op} I[2*i+p, 2*j+q] where p < 2, q < 2");
        let c = case(&statement, shapes, density, seed);
        // The last: a window index before an output index, where the fill
        // counts each element of the output indices inside it apart.
        for order in ["", "j+i+p+q", "i+p+j+q"] {
            let schedule: Schedule = format!("order={order}").parse().unwrap_or_default();
            let kernel =
                pooled_everywhere(&c, "dcsr", &schedule, &format!("{statement} at {density}, {order}"));
            assert!(kernel.contains("zero folded in where fewer than 4"), "{kernel}");
        }
        let (legal, refused) = every_order_on(&c, "dcsr", None, false);
        assert_eq!((legal, refused), (12, 12), "{statement}");
    }
}

/// Lowers `c` with `I` in `format` under `schedule`, checks the Rust
/// executor against the reference and the C against the executor, and
/// returns the loop tree.
fn pooled_everywhere(c: &Case, format: &str, schedule: &Schedule, what: &str) -> String {
    let spec: FormatSpec = format.parse().unwrap();
    let formats = BTreeMap::from([("I".to_string(), spec)]);
    let sparse = BTreeMap::from([("I".to_string(), c.entries.clone())]);
    let lowered = lower(&c.einsum, &formats, &sparse, schedule, "pool").unwrap();
    let mut data = c.data.clone();
    data.extend(lowered.arrays.clone());
    let got = execute(&lowered.kernel, &data).unwrap();
    assert_eq!(got, c.want, "{what} in {format}");
    agrees_in_c(&lowered.kernel, &data, &got, what);
    lowered.kernel.to_string()
}

/// Channels last (`O[h,w,c] max= I[2*h+r, 2*w+q, c]`, NHWC without N): the
/// channel level lies below the window's, so the window's indices come
/// before the channel's and the fill counts each channel apart.
#[test]
fn channels_last_pooling_counts_each_channel() {
    let one: Shapes = &[("O", &[6, 5]), ("I", &[12, 5])];
    let two: Shapes = &[("O", &[4, 3, 5]), ("I", &[8, 7, 5])];
    for (op, density, seed) in [("max=", 0.3, 71), ("min=", 0.1, 72), ("max=", 1.0, 73), ("max=", 0.0, 74)] {
        let statement = format!("O[i,c] {op} I[2*i+p, c] where p < 2");
        let c = case(&statement, one, density, seed);
        for format in ["cc", "dc", "csr", "coo"] {
            // c after i and p: (i,p,c) and (p,i,c).
            assert_eq!(every_order_on(&c, format, None, true), (2, 4), "{statement} in {format}");
        }
        let statement = format!("O[h,w,c] {op} I[2*h+r, 2*w+q, c] where r < 2, q < 2");
        let c = case(&statement, two, density, seed);
        for format in ["dcc", "ddc", "csf"] {
            let (legal, _) = every_order(&c, format, None);
            assert!(legal >= 6, "{statement} in {format}: {legal} legal orders");
            // The default order, as `spindle run` takes it, in C too.
            pooled_everywhere(&c, format, &Schedule::default(), &statement);
        }
    }
}

#[test]
fn sums_walk_each_product_over_its_own_operands() {
    // Paper 002's Fig. 8: a union over a reduced and a plain subscript.
    let cases: &[(&str, Shapes)] = &[
        ("A[i,j] = I[i] + J[i+j]", &[("A", &[8, 6]), ("I", &[8]), ("J", &[14])]),
        ("A[i,j] = I[i] - 2 * J[i+j] + F[j]", &[("A", &[8, 6]), ("I", &[8]), ("J", &[14]), ("F", &[6])]),
        ("O[i] = (I[i+p] + J[2*i+p]) * F[p]", &[("O", &[10]), ("I", &[13]), ("J", &[22]), ("F", &[3])]),
        // A summed index one product lacks counts once per value.
        ("O[i] = I[i] + J[i+p] where p < 3", &[("O", &[10]), ("I", &[10]), ("J", &[13])]),
    ];
    for (statement, shapes) in cases {
        for (density, seed) in [(0.3, 51), (0.05, 52), (1.0, 53)] {
            let c = case(statement, shapes, density, seed);
            for (fi, fj) in [("coo", "coo"), ("c", "csf")] {
                let (formats, sparse) = stored_i_and_j(&c, fi, fj);
                let names: Vec<String> = c.einsum.indices.iter().map(|i| i.name.clone()).collect();
                for order in permutations(&names) {
                    let schedule = Schedule { order: order.clone(), ..Schedule::default() };
                    let lowered = lower(&c.einsum, &formats, &sparse, &schedule, "sum").unwrap();
                    let mut data = c.data.clone();
                    data.extend(lowered.arrays.clone());
                    let got = execute(&lowered.kernel, &data).unwrap();
                    let err = (&got - &c.want).iter().fold(0.0f64, |m, d| m.max(d.abs()));
                    assert!(
                        err < 1e-9,
                        "{statement} ({fi}, {fj}) order {order:?}: {err}\n{}",
                        lowered.kernel
                    );
                    if order == names {
                        agrees_in_c(&lowered.kernel, &data, &got, statement);
                    }
                }
            }
        }
    }
}

#[test]
fn products_of_stored_operands_walk_one_and_find_the_others() {
    // A sparse filter, two sparse signals read at one window, and a pooling
    // of a product; (I's format, J's format) pairs for each.
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Shapes, Pairs)] = &[
        (
            "O[i,j] += I[i+p,j+q] * J[p,q]",
            &[("O", &[12, 10]), ("I", &[14, 12]), ("J", &[3, 3])],
            &[("coo", "coo"), ("csf", "dcsr"), ("dc", "dd"), ("csr", "cd")],
        ),
        (
            "O[i] = I[i+p] * J[i+p] * F[p] where p < 3",
            &[("O", &[14]), ("I", &[16]), ("J", &[16]), ("F", &[3])],
            &[("coo", "coo"), ("c", "d"), ("d", "c")],
        ),
        ("O[i] max= I[2*i+p] * J[p]", &[("O", &[7]), ("I", &[16]), ("J", &[3])], &[("coo", "c"), ("c", "d")]),
    ];
    for (statement, shapes, pairs) in cases {
        for (density, seed) in [(0.4, 61), (0.1, 62), (1.0, 63)] {
            let c = case(statement, shapes, density, seed);
            for (fi, fj) in pairs.iter() {
                let (formats, sparse) = stored_i_and_j(&c, fi, fj);
                let names: Vec<String> = c.einsum.indices.iter().map(|i| i.name.clone()).collect();
                let mut legal = 0;
                for order in permutations(&names) {
                    let schedule = Schedule { order: order.clone(), ..Schedule::default() };
                    let Ok(lowered) = lower(&c.einsum, &formats, &sparse, &schedule, "product") else {
                        continue;
                    };
                    legal += 1;
                    let mut data = c.data.clone();
                    data.extend(lowered.arrays.clone());
                    let got = execute(&lowered.kernel, &data).unwrap();
                    let err = (&got - &c.want).iter().fold(0.0f64, |m, d| m.max(d.abs()));
                    assert!(
                        err < 1e-9,
                        "{statement} ({fi}, {fj}) order {order:?}: {err}\n{}",
                        lowered.kernel
                    );
                    if legal == 1 {
                        assert!(lowered.kernel.to_string().contains("find "), "{}", lowered.kernel);
                        agrees_in_c(&lowered.kernel, &data, &got, statement);
                    }
                }
                assert!(legal > 0, "{statement} ({fi}, {fj}): no legal order");
            }
        }
    }
}

#[test]
fn a_filter_walks_each_stored_level_once_per_window() {
    // The loop tree of `statement` over `I` in `format`, in `order`.
    let tree = |statement: &str, shapes: Shapes, format: &str, order: &str| {
        let c = case(statement, shapes, 0.3, 41);
        let formats = BTreeMap::from([("I".to_string(), format.parse::<FormatSpec>().unwrap())]);
        let sparse = BTreeMap::from([("I".to_string(), c.entries.clone())]);
        let schedule: Schedule = format!("order={order}").parse().unwrap();
        lower(&c.einsum, &formats, &sparse, &schedule, "conv").unwrap().kernel.to_string()
    };
    let cube: Shapes = &[("O", &[6, 5, 4]), ("I", &[8, 7, 6]), ("F", &[3, 3, 3])];
    let statement = "O[i,j,k] += I[i+p,j+q,k+r] * F[p,q,r]";
    // Every compressed level's window pair is one walk of its entries.
    let csf = tree(statement, cube, "csf", "i+p+q+j+r+k");
    for taps in ["taps i in 0..6, p in 0..3", "taps q in 0..3, j in 0..5", "taps r in 0..3, k in 0..4"] {
        assert!(csf.contains(taps), "{taps}:\n{csf}");
    }
    assert!(!csf.contains("subsections"), "{csf}");
    // Dense levels keep their subsection loops (a dense window is a
    // contiguous run the compiler vectorises).
    assert!(!tree(statement, cube, "ddd", "i+p+q+j+r+k").contains("taps"));
    let dcc = tree(statement, cube, "dcc", "i+p+q+j+r+k");
    assert!(dcc.contains("subsections i") && dcc.contains("taps r in 0..3, k in 0..4"), "{dcc}");
    // Neither variable a filter's few taps: the pair stays apart.
    let wide: Shapes = &[("O", &[30]), ("I", &[59]), ("G", &[30])];
    let pair = tree("O[i] += I[i+j] * G[j]", wide, "c", "i+j");
    assert!(pair.contains("subsections i") && !pair.contains("taps"), "{pair}");
}

/// A window read backwards (`I[i-p+2]`) is refused on a stored operand
/// with the reason and the ways forward: densely without the format, or
/// forwards over the flipped filter (it gave the reason alone).
#[test]
fn a_window_read_backwards_is_refused_with_the_ways_forward() {
    let shapes: Shapes = &[("O", &[18]), ("I", &[20]), ("F", &[3])];
    let c = case("O[i] = I[i-p+2] * F[p]", shapes, 0.3, 5);
    let formats = BTreeMap::from([("I".to_string(), "c".parse::<FormatSpec>().unwrap())]);
    let sparse = BTreeMap::from([("I".to_string(), c.entries.clone())]);
    let d = lower(&c.einsum, &formats, &sparse, &Schedule::default(), "conv").unwrap_err();
    assert!(d.message.contains("`p` has coefficient -1"), "{}", d.message);
    assert!(
        d.notes.iter().any(|n| n.contains("drop its --format") && n.contains("flipped along `p`")),
        "{:?}",
        d.notes
    );
}
