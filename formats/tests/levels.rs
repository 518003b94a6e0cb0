//! d/c level lists (`dddc`, `dccc`, `dc`, …): round trips for every letter
//! combination up to order 3 and the sparse-convolution ones at order 4,
//! in identity and permuted mode orders; their levels and arrays; and the
//! matrix formats they coincide with.

use proptest::prelude::*;
use spindle_formats::tensor::ArrayData;
use spindle_formats::{Coo, FormatSpec, LevelTensor, SparseTensor};

/// Every d/c word of length `order`, for order ≤ 3; the convolution
/// formats (and two more) at order 4.
fn letter_lists(order: usize) -> Vec<String> {
    if order == 4 {
        return ["dddc", "dccc", "dcdc", "cddc"].map(String::from).to_vec();
    }
    (0..1usize << order)
        .map(|bits| (0..order).map(|l| if bits >> (order - 1 - l) & 1 == 1 { 'd' } else { 'c' }).collect())
        .collect()
}

/// The identity, the reversal and a rotation of `0..order`.
fn mode_orders(order: usize) -> Vec<Vec<usize>> {
    let mut orders = vec![Vec::new(), (0..order).rev().collect()];
    if order > 2 {
        orders.push((1..order).chain([0]).collect());
    }
    orders
}

fn spec(letters: &str, modes: &[usize]) -> FormatSpec {
    let dense = letters.bytes().map(|b| b == b'd').collect();
    FormatSpec::Levels { dense, modes: modes.to_vec() }
}

/// Checks the round trip, the structure (through `Assembled`, which checks
/// every promise the levels make), the counts, and conversion to CSF.
fn check(coo: &Coo<f64, i32>, spec: &FormatSpec) {
    let canonical = coo.clone().canonicalize();
    let t = SparseTensor::from_coo(coo, spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let SparseTensor::Levels(lt) = &t else { panic!("{spec} is not a level list") };
    let expected = if lt.stores_fill() { canonical.clone().without_zeros() } else { canonical.clone() };
    assert_eq!(t.to_coo().unwrap(), expected, "{spec} → COO");
    assert_eq!(t.nnz(), expected.nnz(), "{spec}");
    assert_eq!(t.stored(), lt.val.len(), "{spec}");
    assert_eq!(*lt.positions().last().unwrap(), lt.val.len(), "{spec}");
    // The same structure read through the level interface.
    let assembled = t.with_values(lt.val.clone());
    let read = assembled.to_coo().unwrap_or_else(|e| panic!("{spec} as assembled: {e}"));
    assert_eq!(
        read.canonicalize().without_zeros().cast::<f64, i32>().unwrap(),
        canonical.clone().without_zeros()
    );
    // Through CSF and back, and the spec survives a round trip as text.
    let csf = t.convert(&FormatSpec::Csf { modes: Vec::new() }).unwrap();
    assert_eq!(csf.convert(spec).unwrap(), SparseTensor::from_coo(&expected, spec).unwrap(), "{spec}");
    assert_eq!(t.spec().to_string().parse::<FormatSpec>().unwrap().to_string(), t.spec().to_string());
    t.stats().unwrap();
}

fn check_every_list(coo: &Coo<f64, i32>) {
    for letters in letter_lists(coo.order()) {
        for modes in mode_orders(coo.order()) {
            check(coo, &spec(&letters, &modes));
        }
    }
}

/// Tensors of order 1 to 4 with small extents (some 1), duplicates and
/// non-zero integer values (sums stay exact and non-zero).
fn tensor(order: usize) -> impl Strategy<Value = Coo<f64, i32>> {
    prop::collection::vec(1usize..5, order).prop_flat_map(|shape| {
        let coord: Vec<_> = shape.iter().map(|&n| 0..n).collect();
        prop::collection::vec((coord, 1u8..9), 0..30).prop_map(move |entries| {
            let crd = (0..shape.len()).map(|d| entries.iter().map(|e| e.0[d] as i32).collect()).collect();
            Coo::new(shape.clone(), crd, entries.iter().map(|e| e.1 as f64).collect()).unwrap()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn order_one_round_trips(coo in tensor(1)) {
        check_every_list(&coo);
    }

    #[test]
    fn matrices_round_trip(coo in tensor(2)) {
        check_every_list(&coo);
    }

    #[test]
    fn third_order_round_trips(coo in tensor(3)) {
        check_every_list(&coo);
    }

    #[test]
    fn fourth_order_round_trips(coo in tensor(4)) {
        check_every_list(&coo);
    }

    #[test]
    fn dc_is_csr_and_cc_is_dcsr(coo in tensor(2)) {
        let arrays = |t: &SparseTensor<f64, i32>| -> Vec<(String, Vec<f64>)> {
            t.arrays()
                .into_iter()
                .map(|(name, a)| {
                    let values = match a {
                        ArrayData::Index(x) => x.iter().map(|&i| i as f64).collect(),
                        ArrayData::Value(x) => x.to_vec(),
                    };
                    (name, values)
                })
                .collect()
        };
        let build = |s: &str| SparseTensor::from_coo(&coo, &s.parse().unwrap()).unwrap();
        let (dc, csr) = (arrays(&build("dc")), arrays(&build("csr")));
        // dc: pos1, crd1, val; CSR: pos, crd, val.
        prop_assert_eq!(dc.iter().map(|a| &a.1).collect::<Vec<_>>(), csr.iter().map(|a| &a.1).collect::<Vec<_>>());
        let (dcsc, csc) = (arrays(&build("dc:modes=1-0")), arrays(&build("csc")));
        prop_assert_eq!(dcsc.iter().map(|a| &a.1).collect::<Vec<_>>(), csc.iter().map(|a| &a.1).collect::<Vec<_>>());
        let SparseTensor::Levels(cc) = build("cc") else { unreachable!() };
        let SparseTensor::DoublyCompressed(dcsr) = build("dcsr") else { unreachable!() };
        prop_assert_eq!(&cc.pos[0], &vec![0, dcsr.crd0.len() as i32]);
        prop_assert_eq!(&cc.crd[0], &dcsr.crd0);
        prop_assert_eq!(&cc.pos[1], &dcsr.pos);
        prop_assert_eq!(&cc.crd[1], &dcsr.crd1);
        prop_assert_eq!(&cc.val, &dcsr.val);
        let SparseTensor::Levels(ccc) = build("cc:modes=1-0") else { unreachable!() };
        let SparseTensor::Csf(csf) = build("csf:modes=1-0") else { unreachable!() };
        prop_assert_eq!((&ccc.pos, &ccc.crd, &ccc.val), (&csf.pos, &csf.crd, &csf.val));
    }
}

#[test]
fn duplicates_are_summed() {
    let coo = Coo::<f64, i32>::new(
        vec![2, 2, 3],
        vec![vec![1, 0, 1, 1], vec![0, 1, 0, 0], vec![2, 0, 2, 1]],
        vec![1.0, 2.0, 3.0, 4.0],
    )
    .unwrap();
    for letters in letter_lists(3) {
        let t = SparseTensor::from_coo(&coo, &spec(&letters, &[])).unwrap();
        let back = t.to_coo().unwrap();
        assert_eq!(back.crd, [vec![0, 1, 1], vec![1, 0, 0], vec![0, 1, 2]], "{letters}");
        assert_eq!(back.val, [2.0, 4.0, 4.0], "{letters}");
    }
    let t = LevelTensor::from_coo(&coo, &[], &[false, false, false]).unwrap();
    assert_eq!(t.val, [2.0, 4.0, 4.0]);
    assert_eq!(t.crd, [vec![0, 1], vec![1, 0], vec![0, 1, 2]]);
    assert_eq!(t.pos, [vec![0, 2], vec![0, 1, 2], vec![0, 1, 3]]);
}

#[test]
fn empty_tensors_round_trip() {
    for shape in [vec![0], vec![3], vec![0, 4], vec![3, 0], vec![2, 3], vec![2, 0, 3], vec![1, 2, 2, 3]] {
        let coo = Coo::<f64, i32>::empty(shape.clone());
        for letters in letter_lists(shape.len()) {
            for modes in mode_orders(shape.len()) {
                let spec = spec(&letters, &modes);
                let t = SparseTensor::from_coo(&coo, &spec).unwrap();
                assert_eq!(t.to_coo().unwrap(), coo, "{spec} of {shape:?}");
                assert_eq!(t.nnz(), 0, "{spec} of {shape:?}");
                t.with_values(vec![0.0; t.stored()]).to_coo().unwrap();
            }
        }
    }
}

#[test]
fn a_dense_last_level_drops_zeros_and_a_compressed_one_keeps_them() {
    let coo =
        Coo::<f64, i32>::from_triplets(3, 3, &[(0, 0, 0.0), (0, 2, 1.0), (2, 1, 0.0), (2, 2, 2.0)]).unwrap();
    for keep in ["dc", "cc", "dc:modes=1-0", "cc:modes=1-0"] {
        let t = SparseTensor::from_coo(&coo, &keep.parse().unwrap()).unwrap();
        assert_eq!(t.to_coo().unwrap(), coo, "{keep}");
        assert_eq!(t.nnz(), 4, "{keep}");
    }
    let nonzero = coo.clone().without_zeros();
    for fill in ["dd", "cd", "cd:modes=1-0", "dd:modes=1-0"] {
        let t = SparseTensor::from_coo(&coo, &fill.parse().unwrap()).unwrap();
        assert_eq!(t.to_coo().unwrap(), nonzero, "{fill}");
        assert_eq!(t.nnz(), 2, "{fill}");
    }
    // `cd`: rows 0 and 2 kept, each a dense row of 3 with fill.
    let t = SparseTensor::from_coo(&coo, &"cd".parse().unwrap()).unwrap();
    let SparseTensor::Levels(cd) = &t else { unreachable!() };
    assert_eq!(cd.crd[0], [0, 2]);
    assert_eq!(cd.val, [0.0, 0.0, 1.0, 0.0, 0.0, 2.0]);
    assert_eq!(t.array_shape("val", 6), [2, 3]);
    let s = t.stats().unwrap();
    assert_eq!((s.nnz, s.stored, s.format.as_str()), (2, 6, "cd"));
    // `dd` is dense storage: the value array has the dense shape.
    let dd = SparseTensor::from_coo(&coo, &"dd".parse().unwrap()).unwrap();
    assert_eq!(dd.array_shape("val", 9), [3, 3]);
    assert_eq!(dd.arrays().len(), 1);
}

#[test]
fn dddc_levels_and_arrays() {
    let x = Coo::<f32, i64>::new(
        vec![2, 3, 3, 8],
        vec![vec![0, 1, 1], vec![2, 0, 0], vec![1, 2, 2], vec![5, 7, 0]],
        vec![1.0, 2.0, 3.0],
    )
    .unwrap();
    let t = SparseTensor::from_coo(&x, &"dddc".parse().unwrap()).unwrap();
    let levels: Vec<String> = t.levels().iter().map(|l| l.to_string()).collect();
    assert_eq!(levels, ["dense(d0)", "dense(d1)", "dense(d2)", "compressed(d3)"]);
    let arrays = t.level_arrays();
    assert!(arrays[..3].iter().all(|a| a.pos.is_none() && a.crd.is_none()));
    assert_eq!((arrays[3].pos.as_deref(), arrays[3].crd.as_deref()), (Some("pos3"), Some("crd3")));
    let names: Vec<String> = t.arrays().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["pos3", "crd3", "val"]);
    let SparseTensor::Levels(lt) = &t else { unreachable!() };
    assert_eq!(lt.pos[3].len(), 2 * 3 * 3 + 1);
    // (n, h, w) = (1, 0, 2) is dense position 11; (0, 2, 1) is 7.
    assert_eq!(lt.pos[3][7..9], [0, 1]);
    assert_eq!(lt.pos[3][11..13], [1, 3]);
    assert_eq!(lt.crd[3], [5, 0, 7]);
    assert_eq!(lt.val, [1.0, 3.0, 2.0]);
    assert_eq!(t.spec().to_string(), "dddc");
    assert_eq!(t.to_coo().unwrap(), x.clone().canonicalize());
}

#[test]
fn transposed_dc_levels_and_arrays() {
    let a = Coo::<f64, i32>::from_triplets(2, 3, &[(0, 2, 1.0), (1, 0, 2.0), (1, 2, 3.0)]).unwrap();
    let t = SparseTensor::from_coo(&a, &"dc:modes=1-0".parse().unwrap()).unwrap();
    let levels: Vec<String> = t.levels().iter().map(|l| l.to_string()).collect();
    assert_eq!(levels, ["dense(d1)", "compressed(d0)"]);
    let arrays = t.level_arrays();
    assert_eq!((arrays[0].pos.as_deref(), arrays[0].crd.as_deref()), (None, None));
    assert_eq!((arrays[1].pos.as_deref(), arrays[1].crd.as_deref()), (Some("pos1"), Some("crd1")));
    let SparseTensor::Levels(lt) = &t else { unreachable!() };
    assert_eq!(lt.pos[1], [0, 1, 1, 3]);
    assert_eq!(lt.crd[1], [1, 0, 1]);
    assert_eq!(lt.val, [2.0, 1.0, 3.0]);
    assert_eq!(t.spec().to_string(), "dc:modes=1-0");
    assert_eq!(t.to_coo().unwrap(), a);
}

#[test]
fn wrong_letter_counts_and_modes_are_errors() {
    let a = Coo::<f64, i32>::from_triplets(2, 3, &[(0, 2, 1.0)]).unwrap();
    let err = |s: &str| SparseTensor::from_coo(&a, &s.parse().unwrap()).unwrap_err().to_string();
    assert_eq!(err("dddc"), "dddc (one d/c letter per dimension) needs a tensor of order 4, got order 2");
    assert_eq!(err("c"), "c (one d/c letter per dimension) needs a tensor of order 1, got order 2");
    let parse = |s: &str| s.parse::<FormatSpec>().unwrap_err().to_string();
    assert_eq!(
        parse("dcc:modes=2-0"),
        "invalid format `dcc:modes=2-0`: modes must be a permutation of 0..3 (one per level), found `2-0`"
    );
    assert_eq!(
        parse("dc:modes=0-2"),
        "invalid format `dc:modes=0-2`: modes must be a permutation of 0..2 (one per level), found `0-2`"
    );
    // A spec built in code is checked when it stores a tensor.
    let bad = FormatSpec::Levels { dense: vec![true, false], modes: vec![0, 0] };
    let err = SparseTensor::from_coo(&a, &bad).unwrap_err().to_string();
    assert_eq!(err, "invalid mode order: [0, 0] names mode 0 twice");
    // A CSF of three modes for a matrix says the orders disagree.
    let csf3: FormatSpec = "csf:modes=0-1-2".parse().unwrap();
    let err = SparseTensor::from_coo(&a, &csf3).unwrap_err().to_string();
    assert_eq!(err, "invalid mode order: [0, 1, 2] names 3 modes, but the tensor has order 2 (modes 0 to 1)");
    let order0 = Coo::<f64, i32>::empty(vec![]);
    let none = FormatSpec::Levels { dense: vec![], modes: vec![] };
    assert_eq!(
        SparseTensor::from_coo(&order0, &none).unwrap_err().to_string(),
        "invalid level list: a tensor of order 0 has no levels"
    );
}

#[test]
fn specs_round_trip_through_display() {
    for order in 1..=4 {
        for letters in letter_lists(order) {
            for modes in mode_orders(order) {
                let spec = spec(&letters, &modes);
                let text = spec.to_string();
                assert!(text.starts_with(&letters), "{text}");
                assert_eq!(text.parse::<FormatSpec>().unwrap(), spec, "{text}");
            }
        }
    }
}

#[test]
fn large_dense_levels_are_errors_not_aborts() {
    let n = 1usize << 20;
    let coo = Coo::<f64, i64>::new(vec![n, n, n], vec![vec![1], vec![2], vec![3]], vec![1.0]).unwrap();
    let err = |s: &str| SparseTensor::from_coo(&coo, &s.parse().unwrap()).unwrap_err().to_string();
    assert!(err("ddc").starts_with("invalid level list pos2: 1099511627777 elements"));
    assert!(err("cdd").starts_with("invalid level list val: 1099511627776 elements"));
    let huge = Coo::<f64, i64>::empty(vec![1 << 40, 1 << 40]);
    assert_eq!(
        SparseTensor::from_coo(&huge, &"dd".parse().unwrap()).unwrap_err().to_string(),
        "invalid level list: its dense levels have over usize::MAX positions"
    );
    // Compressed levels need no per-coordinate storage.
    let t = SparseTensor::from_coo(&coo, &"ccc".parse().unwrap()).unwrap();
    assert_eq!(t.to_coo().unwrap(), coo);
}

/// A format's structure with new values is an assembled tensor of the same
/// entries, for every format that holds a matrix's entries (DCSR, DCSC and
/// COO keep no pos array for their first level, which a masked program's
/// sparse output was then refused for: "level 0 has no pos array").
#[test]
fn every_format_with_new_values_holds_the_same_entries() {
    let coo = Coo::<f64, i32>::from_triplets(
        6,
        5,
        &[(1, 0, 1.0), (1, 4, 2.0), (4, 2, 3.0), (4, 3, -1.0), (5, 1, 0.5)],
    )
    .unwrap();
    for spec in ["coo", "csr", "csc", "dcsr", "dcsc", "csf", "dc", "cc", "groupcoo:g=2"] {
        let t = SparseTensor::from_coo(&coo, &spec.parse().unwrap()).unwrap();
        // The stored values, in storage order, doubled.
        let doubled: Vec<f64> = t
            .arrays()
            .into_iter()
            .find_map(|(name, a)| match a {
                ArrayData::Value(v) if name == "val" => Some(v.iter().map(|v| 2.0 * v).collect()),
                _ => None,
            })
            .unwrap();
        let assembled = t.with_values(doubled).to_coo().unwrap_or_else(|e| panic!("{spec}: {e}"));
        let mut got: Vec<(i64, i64, f64)> = (0..assembled.nnz())
            .map(|n| (assembled.crd[0][n], assembled.crd[1][n], assembled.val[n]))
            .collect();
        // (GroupCOO's padding holds zeros.)
        got.retain(|e| e.2 != 0.0);
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let want: Vec<(i64, i64, f64)> =
            (0..coo.nnz()).map(|n| (coo.crd[0][n] as i64, coo.crd[1][n] as i64, 2.0 * coo.val[n])).collect();
        assert_eq!(got, want, "{spec}");
    }
}
