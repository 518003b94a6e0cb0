//! The kernel IR's textual form over the corpus: every kernel the corpus
//! lowers, before and after the passes and under the schedules the corpus
//! tests use, prints, parses back, verifies and prints the same text, and
//! the parsed kernel prints the same C and CUDA as the lowered one.
//!
//! The text lists the body by phase, so a parsed body is the lowered one
//! sorted by phase (still a topological order). The CUDA printer declares
//! shared arrays in body order: those declarations are compared as a set.

use spindle_ir::kernel::Kernel;
use spindle_ir::kernel::lower::{lower, lower_only};
use spindle_tests::corpus::{build, entries};

const SCHEDULES: [&str; 6] = [
    "",
    "matmul=off",
    "broadcast=eager matmul=off",
    "broadcast=eager",
    "reduce=atomic",
    "reduce=atomic matmul=off",
];

#[test]
fn every_corpus_kernel_round_trips_through_its_text() {
    let mut kernels = 0;
    for (name, entry) in entries() {
        let built = build(&name, &entry);
        for schedule in SCHEDULES {
            let parsed_schedule = schedule.parse().unwrap();
            let lowered = [
                lower_only(&built.einsum, &parsed_schedule, "corpus"),
                lower(&built.einsum, &parsed_schedule, "corpus"),
            ];
            for kernel in lowered {
                let kernel = kernel.unwrap_or_else(|d| panic!("{name} [{schedule}]: {d}"));
                let text = kernel.to_string();
                let parsed =
                    Kernel::parse(&text).unwrap_or_else(|e| panic!("{name} [{schedule}]: {e}\n{text}"));
                assert_eq!(parsed.verify(), Ok(()), "{name} [{schedule}]");
                assert_eq!(parsed.to_string(), text, "{name} [{schedule}]");
                let c = |k: &Kernel| spindle_c::print::print(k, "k").map_err(|e| e.to_string());
                assert_eq!(c(&parsed), c(&kernel), "{name} [{schedule}]: C");
                let cuda = |k: &Kernel| {
                    spindle_cuda::print(k, "k").map(|s| shared_sorted(&s)).map_err(|e| e.to_string())
                };
                assert_eq!(cuda(&parsed), cuda(&kernel), "{name} [{schedule}]: CUDA");
                kernels += 1;
            }
        }
    }
    assert!(kernels >= 12 * SCHEDULES.len() * 2, "{kernels}");
}

/// CUDA source with its `__shared__` declarations sorted.
fn shared_sorted(source: &str) -> String {
    let mut shared: Vec<&str> = source.lines().filter(|l| l.starts_with("  __shared__ ")).collect();
    shared.sort();
    let mut shared = shared.into_iter();
    source
        .lines()
        .map(|l| if l.starts_with("  __shared__ ") { shared.next().unwrap_or(l) } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}
