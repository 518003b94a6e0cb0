//! The textual form of a kernel, for tests, snapshots and `--emit ir`.

use std::fmt::{self, Write as _};

use super::*;

/// `A: f32[64,32]`, with ` out` for the output.
impl fmt::Display for TensorParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(
            f,
            "{}: {}[{}]{}",
            self.name,
            self.dtype.name(),
            dims.join(","),
            if self.output { " out" } else { "" }
        )
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self.tensors.values().map(|t| t.to_string()).collect();
        writeln!(f, "kernel {}({})", self.name, params.join(", "))?;
        let axes: Vec<String> = self
            .axes
            .values()
            .map(|a| {
                let role = match a.role {
                    AxisRole::Parallel => "parallel",
                    AxisRole::Reduced => "reduced",
                };
                format!("{} {}/{} {role}", a.name, a.extent, a.tile)
            })
            .collect();
        writeln!(f, "  axes {}", axes.join(", "))?;
        let init = match self.init {
            OutputInit::Zero => "zero".to_string(),
            OutputInit::Keep => "keep".to_string(),
            OutputInit::Identity(r) => format!("identity({})", r.name()),
        };
        writeln!(f, "  init {init}")?;
        let phases = self.phases();
        let sink_phase = phases[self.sink.value].max(Phase::Program);
        let reduced: Vec<String> = self.reduced_axes().iter().map(|&a| self.axis(a).name.clone()).collect();
        for (phase, title) in [
            (Phase::Program, "program:".to_string()),
            (Phase::Loop, format!("loop {}:", reduced.join(", "))),
            (Phase::Epilogue, "epilogue:".to_string()),
        ] {
            let ids: Vec<ValueId> = self.order.iter().copied().filter(|&id| phases[id] == phase).collect();
            let has_acc = phase == Phase::Loop && self.accumulate.is_some();
            if ids.is_empty() && sink_phase != phase && !has_acc {
                continue;
            }
            writeln!(f, "  {title}")?;
            for id in ids {
                writeln!(f, "    {}", self.value_line(id))?;
            }
            if let (true, Some(acc)) = (has_acc, &self.accumulate) {
                writeln!(
                    f,
                    "    acc {}= {} : {}",
                    acc.reduction.name(),
                    name(acc.partial),
                    self.shape_text(&acc.shape)
                )?;
            }
            if sink_phase == phase {
                writeln!(f, "    {}", self.sink_line())?;
            }
        }
        Ok(())
    }
}

fn name(id: ValueId) -> String {
    id.to_string()
}

fn names(ids: &[ValueId]) -> String {
    ids.iter().map(|&i| name(i)).collect::<Vec<_>>().join(", ")
}

impl Kernel {
    pub(super) fn shape_text(&self, shape: &Shape) -> String {
        let axes: Vec<&str> = shape.iter().map(|&a| self.axis(a).name.as_str()).collect();
        format!("[{}]", axes.join(","))
    }

    /// One value's line of the textual form: `%3 = load A[%1, %2]`.
    pub fn value_line(&self, id: ValueId) -> String {
        let v = self.value(id);
        let mut s = format!("{} = ", name(id));
        let mask = |m: &Option<ValueId>| m.map(|m| format!(" mask {}", name(m))).unwrap_or_default();
        let _ = match &v.op {
            Op::Range(a) => write!(s, "range {}", self.axis(*a).name),
            Op::Const(c) => write!(s, "const {}", c.0),
            Op::ConstInt(c) => write!(s, "const {c}"),
            Op::Load { tensor, index, mask: m } => {
                write!(s, "load {}[{}]{}", self.tensor(*tensor).name, names(index), mask(m))
            }
            Op::Unary(UnaryOp::Neg, a) => write!(s, "neg {}", name(*a)),
            Op::Unary(UnaryOp::Func(func), a) => write!(s, "{} {}", func.name(), name(*a)),
            Op::Binary(op, a, b) => write!(s, "{} {}, {}", op.name(), name(*a), name(*b)),
            Op::Reduce { reduction, value, axis, mask: m } => {
                write!(
                    s,
                    "reduce.{} {} over {}{}",
                    reduction.name(),
                    name(*value),
                    self.axis(*axis).name,
                    mask(m)
                )
            }
            Op::Dot { a, b, axis, mask: m } => {
                write!(s, "dot {}, {} over {}{}", name(*a), name(*b), self.axis(*axis).name, mask(m))
            }
            Op::Broadcast { value } => write!(s, "broadcast {}", name(*value)),
            Op::Accumulator => write!(s, "acc"),
        };
        let _ = write!(s, " : {} {}", self.shape_text(&v.shape), v.scalar.name());
        s
    }

    fn sink_line(&self) -> String {
        let sink = &self.sink;
        let kind = if sink.exclusive { "store" } else { "atomic" };
        let mask = sink.mask.map(|m| format!(" mask {}", name(m))).unwrap_or_default();
        let group = sink
            .group
            .map(|g| format!(" {}({}) over {}", g.kind.name(), g.lanes, self.axis(g.axis).name))
            .unwrap_or_default();
        format!(
            "{kind} {}[{}] {}= {}{mask}{group}",
            self.tensor(sink.tensor).name,
            names(&sink.index),
            sink.reduction.name(),
            name(sink.value)
        )
    }
}
