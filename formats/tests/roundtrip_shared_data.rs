//! Every format round-trips on every real matrix and tensor in
//! `../shared/data`, values and structure.

use spindle_formats::data::{shared_data_dir, shared_matrices};
use spindle_formats::{Coo, FormatSpec, SparseTensor};

const MATRIX_SPECS: &[&str] = &[
    "coo",
    "csr",
    "csc",
    "dcsr",
    "dcsc",
    "csf",
    "csf:modes=1-0",
    "ell",
    "bcsr:bm=4,bk=4",
    "groupcoo:dim=0,g=1",
    "groupcoo:dim=0,g=auto",
    "groupcoo:dim=1,g=8",
    "blockgroupcoo:bm=8,bk=8,dim=0,g=auto",
    "blockgroupcoo:bm=4,bk=2,dim=1,g=2",
    "dc",
    "cc:modes=1-0",
];

/// Dense storage only where it stays small.
const DENSE_LIMIT: usize = 1 << 24;

fn check(name: &str, coo: &Coo<f64, i64>, specs: &[FormatSpec]) {
    let canonical = coo.clone().canonicalize();
    // Real data holds explicit zeros in places; formats that store fill
    // cannot keep those, every other format must.
    let nonzero = canonical.clone().without_zeros();
    let hub_spec = if coo.order() == 2 { FormatSpec::Csr } else { FormatSpec::Coo };
    let hub = SparseTensor::from_coo(&canonical, &hub_spec).unwrap();
    for spec in specs {
        let t = SparseTensor::from_coo(coo, spec).unwrap_or_else(|e| panic!("{name} as {spec}: {e}"));
        let back = t.to_coo().unwrap();
        let keeps_zeros = !matches!(
            t,
            SparseTensor::Dense(_)
                | SparseTensor::Ell(_)
                | SparseTensor::Bcsr(_)
                | SparseTensor::BlockGroupCoo(_)
        ) && !matches!(&t, SparseTensor::Levels(l) if l.stores_fill());
        let expected = if keeps_zeros { &canonical } else { &nonzero };
        assert_eq!(&back, expected, "{name}: {spec} → COO");
        // Through another format (CSR, or COO for tensors) and back to this one.
        assert_eq!(hub.convert(spec).unwrap(), t, "{name}: {hub_spec} → {spec}");
        assert_eq!(
            t.convert(&hub_spec).unwrap(),
            SparseTensor::from_coo(expected, &hub_spec).unwrap(),
            "{name}: {spec} → {hub_spec}"
        );
    }
}

#[test]
fn every_shared_matrix_round_trips_through_every_format() {
    if shared_data_dir().is_none() {
        eprintln!("SKIPPED: shared data folder absent");
        return;
    }
    let files = shared_matrices();
    assert!(!files.is_empty());
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let coo: Coo<f64, i64> = spindle_formats::io::read_mtx(&path).unwrap();
        let mut specs: Vec<FormatSpec> = MATRIX_SPECS.iter().map(|s| s.parse().unwrap()).collect();
        if coo.shape.iter().product::<usize>() <= DENSE_LIMIT {
            specs.push(FormatSpec::Dense);
        }
        check(&name, &coo, &specs);
    }
}

#[test]
fn every_shared_tensor_round_trips_through_every_format() {
    let Some(dir) = shared_data_dir() else {
        eprintln!("SKIPPED: shared data folder absent");
        return;
    };
    for file in ["small.tns", "3d_3_8.tns", "med.tns"] {
        let coo: Coo<f64, i64> = spindle_formats::io::read_tns(&dir.join("tensors").join(file)).unwrap();
        let mut specs: Vec<FormatSpec> = [
            "coo",
            "csf",
            "csf:modes=2-0-1",
            "groupcoo:dim=0,g=auto",
            "groupcoo:dim=2,g=4",
            "dcc",
            "ccc:modes=2-0-1",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        if coo.shape.iter().product::<usize>() <= DENSE_LIMIT {
            specs.push(FormatSpec::Dense);
        }
        check(file, &coo, &specs);
    }
}
