//! Every policy, under every switch, gives the reference's components
//! (a sorted map summing every insert) for tensors of order 1 to 4 with many
//! repeated coordinates, and compresses into every output format.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_formats::FormatSpec;
use spindle_workspaces::ism::{
    Accumulation, Bucket, Coord, Dense, Hash, Ism, Labels, Map, Options, compress, merge_sorted,
    next_capacity,
};

/// Random inserts over `shape`, about a third of them at coordinates seen
/// before.
fn inserts(shape: &[usize], n: usize, seed: u64) -> Vec<(Vec<usize>, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out: Vec<(Vec<usize>, f64)> = Vec::new();
    for _ in 0..n {
        let coords = if !out.is_empty() && rng.random_range(0..3) == 0 {
            out[rng.random_range(0..out.len())].0.clone()
        } else {
            shape.iter().map(|&d| rng.random_range(0..d)).collect()
        };
        out.push((coords, rng.random_range(-1.0..1.0)));
    }
    out
}

fn reference(labels: &Labels, inserts: &[(Vec<usize>, f64)]) -> Vec<(u64, f64)> {
    let mut map = BTreeMap::new();
    for (c, v) in inserts {
        *map.entry(labels.label(c)).or_insert(0.0) += v;
    }
    map.into_iter().collect()
}

fn run<P: Accumulation>(
    policy: P,
    labels: &Labels,
    inserts: &[(Vec<usize>, f64)],
    options: Options,
) -> Vec<(u64, f64)> {
    let mut ws = Ism::new(labels.clone(), policy, options);
    for (c, v) in inserts {
        ws.insert(c, *v);
    }
    assert!(ws.peak_bytes() > 0);
    ws.finish()
}

fn same(got: &[(u64, f64)], want: &[(u64, f64)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: entries");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{what}: labels");
        assert!((g.1 - w.1).abs() < 1e-12, "{what}: at {} got {} expected {}", g.0, g.1, w.1);
    }
}

#[test]
fn every_policy_matches_the_reference_at_every_order() {
    let shapes: [&[usize]; 4] = [&[500], &[40, 30], &[9, 8, 12], &[5, 6, 7, 4]];
    let switches = [
        Options { reallocation: true, double_buffering: true },
        Options { reallocation: false, double_buffering: true },
        Options { reallocation: true, double_buffering: false },
    ];
    for (k, shape) in shapes.iter().enumerate() {
        let labels = Labels::new(shape).unwrap();
        let inserts = inserts(shape, 700, k as u64);
        let want = reference(&labels, &inserts);
        for options in switches {
            let what = |p: &str| format!("{p} over {shape:?} with {options:?}");
            same(&run(Bucket::new(labels.clone(), 16), &labels, &inserts, options), &want, &what("bucket"));
            same(&run(Hash::new(16), &labels, &inserts, options), &want, &what("hash"));
            same(&run(Coord::new(16, true), &labels, &inserts, options), &want, &what("coord, indexed"));
            same(&run(Coord::new(16, false), &labels, &inserts, options), &want, &what("coord"));
            same(&run(Coord::vector(true), &labels, &inserts, options), &want, &what("vector"));
            same(&run(Map::default(), &labels, &inserts, options), &want, &what("map"));
            same(&run(Dense::new(&labels).unwrap(), &labels, &inserts, options), &want, &what("dense"));
        }
    }
}

#[test]
fn small_accumulation_arrays_merge_often_and_grow() {
    let labels = Labels::new(&[100, 100]).unwrap();
    let inserts = inserts(&[100, 100], 5000, 9);
    let mut fixed =
        Ism::new(labels.clone(), Coord::new(8, true), Options { reallocation: false, ..Options::default() });
    let mut grown = Ism::new(labels.clone(), Coord::new(8, true), Options::default());
    for (c, v) in &inserts {
        fixed.insert(c, *v);
        grown.insert(c, *v);
    }
    assert!(fixed.merges() >= 5000 / 8 - 1, "{} merges", fixed.merges());
    assert!(grown.merges() < 10, "growth keeps merges few: {}", grown.merges());
    same(&fixed.finish(), &grown.finish(), "fixed against grown");
    assert_eq!(next_capacity(100), 400);
    assert!(next_capacity(1 << 20) < 2 << 20, "large arrays grow by less than doubling");
}

#[test]
fn components_compress_into_every_output_format() {
    for (shape, specs) in [
        (&[30, 20][..], &["csr", "csc", "dcsr", "dcsc", "coo", "csf"][..]),
        (&[6, 7, 8][..], &["coo", "csf", "csf:modes=2-0-1"][..]),
    ] {
        let labels = Labels::new(shape).unwrap();
        let all = reference(&labels, &inserts(shape, 300, 4));
        for spec in specs {
            let tensor = compress(&labels, &all, &spec.parse::<FormatSpec>().unwrap()).unwrap();
            let mut coo = tensor.to_coo().unwrap();
            coo = coo.canonicalize();
            let got: Vec<(u64, f64)> =
                (0..coo.nnz()).map(|e| (labels.label(&coo.coord(e)), coo.val[e])).collect();
            same(&got, &all, spec);
        }
    }
}

#[test]
fn labels_round_trip_and_large_shapes_are_refused() {
    let labels = Labels::new(&[3, 5, 7]).unwrap();
    let mut at = [0; 3];
    for l in 0..labels.range() {
        labels.coords(l, &mut at);
        assert_eq!(labels.label(&at), l);
        assert_eq!(labels.leading(l), at[0]);
    }
    assert!(Labels::new(&[1 << 40, 1 << 30]).is_err());
    assert!(Dense::new(&Labels::new(&[1 << 20, 1 << 20]).unwrap()).is_err());
    let mut out = Vec::new();
    merge_sorted(&[(1, 1.0), (4, 2.0)], &[(1, 0.5), (3, 1.0)], &mut out);
    assert_eq!(out, [(1, 1.5), (3, 1.0), (4, 2.0)]);
}

#[test]
fn the_pipelined_ism_matches_the_reference() {
    for (k, shape) in [&[40, 30][..], &[9, 8, 12][..]].iter().enumerate() {
        let labels = Labels::new(shape).unwrap();
        let inserts = inserts(shape, 3000, 20 + k as u64);
        let want = reference(&labels, &inserts);
        let run_pipelined = |mut ws: spindle_workspaces::ism::Pipelined<_>| {
            for (c, v) in &inserts {
                ws.insert(c, *v);
            }
            assert!(ws.merges() >= 1);
            ws.finish()
        };
        let pipelined =
            spindle_workspaces::ism::Pipelined::new(labels.clone(), Coord::new(8, true), Coord::new(8, true));
        same(&run_pipelined(pipelined), &want, "pipelined coord");
        let hashed = spindle_workspaces::ism::Pipelined::new(labels.clone(), Hash::new(8), Hash::new(8));
        let got = {
            let mut ws = hashed;
            for (c, v) in &inserts {
                ws.insert(c, *v);
            }
            ws.finish()
        };
        same(&got, &want, "pipelined hash");
    }
}

#[test]
fn the_parallel_ism_matches_the_reference_on_any_thread_count() {
    let shape = [60, 50];
    let labels = Labels::new(&shape).unwrap();
    let inserts = inserts(&shape, 4000, 31);
    let want = reference(&labels, &inserts);
    let chunk = 4000 / 16;
    for threads in [1, 2, 3, 4] {
        let got = spindle_workspaces::ism::parallel(
            &labels,
            threads,
            || Bucket::new(labels.clone(), 32),
            Options::default(),
            16,
            |part, insert| {
                for (c, v) in &inserts[part * chunk..(part + 1) * chunk] {
                    insert(c, *v);
                }
            },
        );
        same(&got, &want, &format!("parallel on {threads} threads"));
    }
}
