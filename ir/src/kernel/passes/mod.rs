//! Passes over the kernel IR, each in its own module, and the pass manager
//! that runs them. Each pass has IR-in / IR-out tests under
//! `ir/tests/passes/<pass>/` (see `ir/tests/passes.rs`).

pub mod lazy_broadcast;
pub mod native_matmul;

use std::fmt;

use super::{Kernel, Op, Shape, ValueId, VerifyError};

/// A named rewrite of a kernel.
#[derive(Clone, Copy)]
pub struct Pass {
    /// The name IR tests, dumps and errors use.
    pub name: &'static str,
    pub run: fn(&mut Kernel),
}

impl fmt::Debug for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

pub const LAZY_BROADCAST: Pass = Pass { name: "lazy_broadcast", run: lazy_broadcast::run };
pub const NATIVE_MATMUL: Pass = Pass { name: "native_matmul", run: native_matmul::run };

/// Every pass, in the order the lowering pipeline runs them.
pub const ALL: [Pass; 2] = [LAZY_BROADCAST, NATIVE_MATMUL];

/// The pass called `name`.
pub fn by_name(name: &str) -> Option<Pass> {
    ALL.into_iter().find(|p| p.name == name)
}

/// A pass left invalid IR behind: a compiler bug, reported with the pass
/// and the IR it produced.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("invalid kernel IR after {after}: {error}\n{ir}")]
pub struct PassError {
    /// The pass, or `input` for the IR the pipeline was given.
    pub after: &'static str,
    pub error: VerifyError,
    pub ir: String,
}

/// Runs a list of passes, verifying the IR before the first and after
/// every one (the verifier is linear in the kernel, so it always runs), and
/// optionally printing the IR after each to stderr.
#[derive(Clone, Debug, Default)]
pub struct PassManager {
    passes: Vec<Pass>,
    dump: bool,
}

impl PassManager {
    pub fn new(passes: impl IntoIterator<Item = Pass>) -> Self {
        PassManager { passes: passes.into_iter().collect(), dump: dump_requested() }
    }

    /// Prints the IR after every pass to stderr (also on with the
    /// environment variable `SPINDLE_DUMP_IR=1`).
    pub fn dump(mut self, on: bool) -> Self {
        self.dump = on;
        self
    }

    pub fn passes(&self) -> &[Pass] {
        &self.passes
    }

    /// Runs the passes on `kernel`.
    pub fn run(&self, kernel: &mut Kernel) -> Result<(), PassError> {
        self.run_observed(kernel, |after, k| {
            if self.dump {
                eprintln!("// IR after {after}\n{k}");
            }
        })
    }

    /// Runs the passes, calling `observe` with the verified IR before the
    /// first (named `input`) and after each.
    pub fn run_observed(
        &self,
        kernel: &mut Kernel,
        mut observe: impl FnMut(&'static str, &Kernel),
    ) -> Result<(), PassError> {
        let check = |after: &'static str, k: &Kernel| {
            k.verify().map_err(|error| PassError { after, error, ir: k.to_string() })
        };
        check("input", kernel)?;
        observe("input", kernel);
        for pass in &self.passes {
            (pass.run)(kernel);
            check(pass.name, kernel)?;
            observe(pass.name, kernel);
        }
        Ok(())
    }
}

fn dump_requested() -> bool {
    std::env::var_os("SPINDLE_DUMP_IR").is_some_and(|v| v == "1")
}

/// Makes every user of `old` use `new` instead.
pub(crate) fn replace_uses(kernel: &mut Kernel, old: ValueId, new: ValueId) {
    let swap = |v: &mut ValueId| {
        if *v == old {
            *v = new;
        }
    };
    kernel.values.values_mut().flat_map(|v| v.op.operands_mut()).for_each(swap);
    kernel.root_uses_mut().for_each(swap);
}

/// Adds a value right after `after` in the computation order.
pub(crate) fn insert_after(kernel: &mut Kernel, after: ValueId, value: super::Value) -> ValueId {
    let id = kernel.values.push(value);
    let at = kernel.order.iter().position(|&v| v == after).map_or(kernel.order.len(), |p| p + 1);
    kernel.order.insert(at, id);
    id
}

/// Recomputes every shape from its operands, in order: ranges vary over
/// their axis, reductions drop theirs, the rest take the union.
pub(crate) fn recompute_shapes(kernel: &mut Kernel) {
    for i in 0..kernel.order.len() {
        let id = kernel.order[i];
        let union = |k: &Kernel| -> Shape {
            let mut s: Shape = k.operands(id).flat_map(|o| k.value(o).shape.clone()).collect();
            s.sort();
            s.dedup();
            s
        };
        let shape = match &kernel.value(id).op {
            Op::Range(axis) => vec![*axis],
            Op::Const(_) | Op::ConstInt(_) => Vec::new(),
            Op::Accumulator => {
                kernel.accumulate.as_ref().map(|a| kernel.value(a.partial).shape.clone()).unwrap_or_default()
            }
            Op::Broadcast { .. } => continue,
            Op::Reduce { axis, .. } | Op::Dot { axis, .. } => {
                let axis = *axis;
                union(kernel).into_iter().filter(|&a| a != axis).collect()
            }
            _ => union(kernel),
        };
        kernel.values[id].shape = shape;
    }
    if let Some(acc) = &mut kernel.accumulate {
        acc.shape = kernel.values[acc.partial].shape.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::lower::{lower_only, pipeline};
    use crate::lang::{check, declarations, parse};

    fn spmv() -> Kernel {
        let d = declarations(&[("y", &[10], "f32"), ("A", &[10, 12], "f32"), ("x", &[12], "f32")]);
        let e = check(&parse("y[i] += A[i,k] * x[k]").unwrap(), &d).unwrap();
        lower_only(&e, &"broadcast=eager".parse().unwrap(), "k").unwrap()
    }

    fn names(pm: &PassManager) -> Vec<&'static str> {
        pm.passes().iter().map(|p| p.name).collect()
    }

    #[test]
    fn the_schedule_picks_the_passes() {
        assert_eq!(names(&pipeline(&"".parse().unwrap())), ["lazy_broadcast", "native_matmul"]);
        assert_eq!(names(&pipeline(&"broadcast=eager".parse().unwrap())), ["native_matmul"]);
        assert_eq!(names(&pipeline(&"matmul=off".parse().unwrap())), ["lazy_broadcast"]);
        assert!(names(&pipeline(&"broadcast=eager matmul=off".parse().unwrap())).is_empty());
        for pass in ALL {
            assert_eq!(by_name(pass.name).map(|p| p.name), Some(pass.name));
        }
        assert!(by_name("no_such_pass").is_none());
    }

    #[test]
    fn every_pass_is_observed_after_it_runs() {
        let mut k = spmv();
        let mut seen = Vec::new();
        PassManager::new(ALL).run_observed(&mut k, |after, k| seen.push((after, k.to_string()))).unwrap();
        let after: Vec<&str> = seen.iter().map(|(a, _)| *a).collect();
        assert_eq!(after, ["input", "lazy_broadcast", "native_matmul"]);
        // Each pass changed this kernel: the broadcasts go, then the sum
        // becomes a dot.
        assert!(seen[0].1.contains("broadcast") && !seen[1].1.contains("broadcast"), "{}", seen[1].1);
        assert!(!seen[1].1.contains("dot") && seen[2].1.contains("dot"), "{}", seen[2].1);
        assert_eq!(seen[2].1, k.to_string());
    }

    #[test]
    fn a_pass_that_breaks_the_ir_is_named() {
        const BREAKS: Pass = Pass { name: "breaks", run: |k| k.order.reverse() };
        let mut k = spmv();
        let e = PassManager::new([LAZY_BROADCAST, BREAKS, NATIVE_MATMUL]).run(&mut k).unwrap_err();
        assert_eq!(e.after, "breaks");
        assert!(e.error.reason.contains("computed after it"), "{e}");
        assert!(e.to_string().starts_with("invalid kernel IR after breaks: "), "{e}");
        // Broken input is refused before any pass runs.
        let mut k = spmv();
        k.order.reverse();
        let e = PassManager::new(ALL).run(&mut k).unwrap_err();
        assert_eq!(e.after, "input");
    }
}
