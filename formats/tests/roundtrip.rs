//! Every format round-trips through every other, values and structure.

use proptest::prelude::*;
use spindle_formats::{Coo, FormatSpec, Index, SparseTensor, Value};

const MATRIX_SPECS: &[&str] = &[
    "dense",
    "coo",
    "csr",
    "csc",
    "dcsr",
    "dcsc",
    "csf",
    "csf:modes=1-0",
    "ell",
    "bcsr:bm=2,bk=3",
    "bcsr:bm=1,bk=1",
    "groupcoo:dim=0,g=1",
    "groupcoo:dim=0,g=3",
    "groupcoo:dim=0,g=auto",
    "groupcoo:dim=1,g=2",
    "blockgroupcoo:bm=2,bk=2,dim=0,g=2",
    "blockgroupcoo:bm=3,bk=1,dim=1,g=auto",
    "dc",
    "cc",
    "dc:modes=1-0",
    "cd",
    "dd:modes=1-0",
];

const TENSOR_SPECS: &[&str] = &[
    "dense",
    "coo",
    "csf",
    "csf:modes=2-0-1",
    "groupcoo:dim=0,g=2",
    "groupcoo:dim=1,g=3",
    "groupcoo:dim=2,g=auto",
    "dcc",
    "ccd:modes=2-0-1",
    "ddc:modes=1-2-0",
];

fn specs(list: &[&str]) -> Vec<FormatSpec> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// Checks that `a → from → to → COO` gives `a` back and that converting
/// through `from` builds the same arrays as building `to` directly.
fn check_all_pairs<V: Value, I: Index>(coo: &Coo<V, I>, specs: &[FormatSpec]) {
    let canonical = coo.clone().canonicalize();
    let direct: Vec<SparseTensor<V, I>> =
        specs.iter().map(|s| SparseTensor::from_coo(coo, s).unwrap()).collect();
    for (from_spec, from) in specs.iter().zip(&direct) {
        assert_eq!(from.to_coo().unwrap(), canonical, "{from_spec} → COO");
        for (to_spec, to) in specs.iter().zip(&direct) {
            let converted = from.convert(to_spec).unwrap();
            assert_eq!(&converted, to, "{from_spec} → {to_spec} differs from building {to_spec} directly");
        }
    }
}

/// Matrices with empty rows, duplicates, one row or one column, and
/// non-zero integer values (sums of duplicates stay exact and non-zero).
fn matrix() -> impl Strategy<Value = Coo<f64, i32>> {
    (1usize..9, 1usize..9).prop_flat_map(|(rows, cols)| {
        prop::collection::vec((0..rows, 0..cols, 1u8..9), 0..(rows * cols * 2)).prop_map(move |entries| {
            let entries: Vec<_> = entries.into_iter().map(|(r, c, v)| (r, c, v as f64)).collect();
            Coo::from_triplets(rows, cols, &entries).unwrap()
        })
    })
}

fn tensor3() -> impl Strategy<Value = Coo<f32, i64>> {
    (1usize..5, 1usize..5, 1usize..5).prop_flat_map(|(a, b, c)| {
        prop::collection::vec((0..a, 0..b, 0..c, 1u8..9), 0..40).prop_map(move |entries| {
            let crd = vec![
                entries.iter().map(|e| e.0 as i64).collect(),
                entries.iter().map(|e| e.1 as i64).collect(),
                entries.iter().map(|e| e.2 as i64).collect(),
            ];
            Coo::new(vec![a, b, c], crd, entries.iter().map(|e| e.3 as f32).collect()).unwrap()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn matrices_round_trip_through_every_pair(coo in matrix()) {
        check_all_pairs(&coo, &specs(MATRIX_SPECS));
    }

    #[test]
    fn other_dtypes_round_trip(coo in matrix()) {
        check_all_pairs(&coo.cast::<f32, i64>().unwrap(), &specs(MATRIX_SPECS));
        check_all_pairs(&coo.cast::<half::f16, i32>().unwrap(), &specs(MATRIX_SPECS));
        check_all_pairs(&coo.cast::<half::bf16, i64>().unwrap(), &specs(MATRIX_SPECS));
    }

    #[test]
    fn third_order_tensors_round_trip(coo in tensor3()) {
        check_all_pairs(&coo, &specs(TENSOR_SPECS));
    }
}

#[test]
fn empty_matrices_round_trip() {
    for (rows, cols) in [(0, 0), (0, 5), (5, 0), (3, 4)] {
        let coo = Coo::<f64, i32>::from_triplets(rows, cols, &[]).unwrap();
        check_all_pairs(&coo, &specs(MATRIX_SPECS));
    }
}

#[test]
fn formats_without_fill_keep_explicit_zeros() {
    let coo =
        Coo::<f64, i32>::from_triplets(3, 3, &[(0, 0, 0.0), (0, 2, 1.0), (2, 1, 0.0), (2, 2, 2.0)]).unwrap();
    let keep = [
        "coo",
        "csr",
        "csc",
        "dcsr",
        "dcsc",
        "csf",
        "groupcoo:dim=0,g=4",
        "groupcoo:dim=1,g=1",
        "dc",
        "cc:modes=1-0",
    ];
    for spec in specs(&keep) {
        let t = SparseTensor::from_coo(&coo, &spec).unwrap();
        assert_eq!(t.to_coo().unwrap(), coo, "{spec}");
        assert_eq!(t.nnz(), 4, "{spec}");
    }
    let fill = ["dense", "ell", "bcsr:bm=2,bk=2", "blockgroupcoo:bm=2,bk=2,dim=0,g=2", "cd", "dd"];
    for spec in specs(&fill) {
        let t = SparseTensor::from_coo(&coo, &spec).unwrap();
        assert_eq!(t.to_coo().unwrap(), coo.clone().without_zeros(), "{spec}");
    }
}

#[test]
fn matrix_only_formats_refuse_tensors() {
    let coo = Coo::<f64, i32>::new(vec![2, 2, 2], vec![vec![0], vec![1], vec![1]], vec![1.0]).unwrap();
    let err = SparseTensor::from_coo(&coo, &"csr".parse().unwrap()).unwrap_err();
    assert_eq!(err.to_string(), "csr needs a tensor of order 2, got order 3");
}

#[test]
fn index_overflow_is_an_error() {
    let coo = Coo::<f64, i64>::from_triplets(1 << 33, 2, &[(1 << 32, 1, 1.0)]).unwrap();
    let err = coo.cast::<f64, i32>().unwrap_err();
    assert_eq!(err.to_string(), "4294967296 does not fit in an i32 index");
}

#[test]
fn absurd_parameters_are_errors_not_aborts() {
    let coo = Coo::<f32, i32>::from_triplets(34, 34, &[(0, 1, 1.0), (5, 7, 2.0)]).unwrap();
    let err = |spec: &str| SparseTensor::from_coo(&coo, &spec.parse().unwrap()).unwrap_err().to_string();
    assert_eq!(
        err("groupcoo:g=1000000000"),
        "invalid GroupCOO: g=1000000000 pads each of its 2 groups to 1000000000 entries though the fullest \
         slice holds 1: 2000000000 elements of f32 (4 bytes each) exceed the 4 GiB limit on one array \
         (g=auto picks a size from the occupancy)"
    );
    assert!(err("groupcoo:g=4611686018427387904").contains(": 9223372036854775808 elements"));
    assert!(err("bcsr:bm=4294967296,bk=4294967296").starts_with("invalid BCSR block: more than usize::MAX"));
    assert!(err("blockgroupcoo:bm=4,bk=4,g=1000000000000").starts_with(
        "invalid BlockGroupCOO: g=1000000000000 pads each of its 2 groups to 1000000000000 blocks"
    ));
    assert!(err("blockgroupcoo:bm=65536,bk=65536,g=1").starts_with("invalid BlockGroupCOO block:"));
    let zero = spindle_formats::BlockGroupCoo::from_coo(&coo, 2, 2, 0, spindle_formats::GroupSize::Fixed(0));
    assert_eq!(zero.unwrap_err().to_string(), "invalid BlockGroupCOO: group size must be positive");
}

#[test]
fn hypersparse_matrices_need_no_per_row_storage() {
    let n = 1usize << 40;
    let coo = Coo::<f64, i64>::new(
        vec![n, n],
        vec![vec![n as i64 - 1, 3, 3], vec![0, n as i64 - 2, 1]],
        vec![1.0, 2.0, 3.0],
    )
    .unwrap();
    for spec in ["coo", "dcsr", "dcsc", "csf", "groupcoo:dim=1,g=2", "cc", "cc:modes=1-0"] {
        let spec: FormatSpec = spec.parse().unwrap();
        let t = SparseTensor::from_coo(&coo, &spec).unwrap();
        assert_eq!(t.to_coo().unwrap(), coo.clone().canonicalize(), "{spec}");
    }
    let err = SparseTensor::from_coo(&coo, &FormatSpec::Csr).unwrap_err().to_string();
    assert!(err.starts_with("invalid CSR/CSC pos: 1099511627777 elements"), "{err}");
}
