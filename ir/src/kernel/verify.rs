//! The verifier: checks the invariants listed on [`Kernel::verify`]. The
//! pass manager runs it after every pass, so a pass that breaks the IR is
//! caught where it breaks it, not in a printer or at run time.

use std::fmt;

use super::*;

/// Where the verifier found a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Kernel,
    Tensor(TensorId),
    Axis(AxisId),
    Value(ValueId),
    Accumulator,
    Sink,
}

/// An invariant the kernel breaks: where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {reason}")]
pub struct VerifyError {
    pub at: Location,
    pub reason: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Kernel => f.write_str("kernel"),
            Location::Tensor(t) => write!(f, "tensor {}", t.as_u32()),
            Location::Axis(a) => write!(f, "axis {}", a.as_u32()),
            Location::Value(v) => write!(f, "{v}"),
            Location::Accumulator => f.write_str("accumulator"),
            Location::Sink => f.write_str("sink"),
        }
    }
}

fn fail<T>(at: Location, reason: impl Into<String>) -> Result<T, VerifyError> {
    Err(VerifyError { at, reason: reason.into() })
}

impl Kernel {
    /// Checks the kernel's invariants; the first broken one is the error.
    ///
    /// - Tensors and axes have distinct names; exactly one tensor is the
    ///   output. Tiles are powers of two; parallel axes come before reduced
    ///   ones.
    /// - Every value in the body exists, appears once, and reads only values
    ///   computed before it in the body.
    /// - Shapes list existing axes in increasing order without repeats. A
    ///   value's shape is the union of its operands' shapes (less the axis a
    ///   `reduce` or `dot` removes); only `broadcast` widens a shape (or
    ///   keeps it). Ranges vary over their axis, literals over none.
    /// - Scalar types: index tiles are `int`, masks `bool`, arithmetic and
    ///   comparisons read numbers, a load is `int` exactly when its tensor
    ///   holds indices, `reduce` and `dot` run over a reduced axis both
    ///   their inputs vary over.
    /// - The accumulator: an `acc` value exists exactly when the kernel
    ///   accumulates, has the accumulator's shape, the partial has it too
    ///   and does not read the accumulator, and the fold's reduction is the
    ///   sink's.
    /// - The sink writes the output tensor with one `int` index tile per
    ///   dimension and a `bool` mask. A group runs along an axis of the
    ///   sink's elements, its lanes a power of two up to 32 that divides
    ///   the axis's tile; a parallel group's axis is in no index tile (all
    ///   its lanes write one element).
    pub fn verify(&self) -> Result<(), VerifyError> {
        self.verify_tables()?;
        self.verify_body()?;
        self.verify_accumulator()?;
        self.verify_sink()
    }

    fn verify_tables(&self) -> Result<(), VerifyError> {
        for (id, t) in self.tensors.iter() {
            if self.tensors.iter().any(|(other, o)| other < id && o.name == t.name) {
                return fail(Location::Tensor(id), format!("a second tensor named `{}`", t.name));
            }
        }
        let outputs = self.tensors.values().filter(|t| t.output).count();
        if outputs != 1 {
            return fail(Location::Kernel, format!("{outputs} output tensors, expected 1"));
        }
        let mut reduced_seen = false;
        for (id, a) in self.axes.iter() {
            if self.axes.iter().any(|(other, o)| other < id && o.name == a.name) {
                return fail(Location::Axis(id), format!("a second axis named `{}`", a.name));
            }
            if !a.tile.is_power_of_two() {
                return fail(Location::Axis(id), format!("tile {} is not a power of two", a.tile));
            }
            match a.role {
                AxisRole::Reduced => reduced_seen = true,
                AxisRole::Parallel if reduced_seen => {
                    return fail(Location::Axis(id), "a parallel axis after a reduced one");
                }
                AxisRole::Parallel => {}
            }
        }
        Ok(())
    }

    fn verify_body(&self) -> Result<(), VerifyError> {
        let mut defined: SecondaryMap<ValueId, bool> = SecondaryMap::with_capacity(self.values.len());
        let mut accumulators = 0;
        for &id in &self.order {
            let at = Location::Value(id);
            if !self.values.is_valid(id) {
                return fail(at, "is in the body but not in the value arena");
            }
            if defined[id] {
                return fail(at, "appears twice in the body");
            }
            if let Some(o) = self.operands(id).find(|&o| !defined[o]) {
                let why = if self.values.is_valid(o) { "computed after it" } else { "not a value" };
                return fail(at, format!("reads {o}, which is {why}"));
            }
            let v = self.value(id);
            self.verify_shape(at, &v.shape)?;
            self.verify_op(id, v)?;
            accumulators += usize::from(v.op == Op::Accumulator);
            defined[id] = true;
        }
        if accumulators > 1 {
            return fail(Location::Kernel, format!("{accumulators} accumulator values, expected at most 1"));
        }
        Ok(())
    }

    fn verify_shape(&self, at: Location, shape: &Shape) -> Result<(), VerifyError> {
        if let Some(a) = shape.iter().find(|&&a| !self.axes.is_valid(a)) {
            return fail(at, format!("shape names {a}, which is not an axis"));
        }
        if shape.windows(2).any(|w| w[0] >= w[1]) {
            return fail(
                at,
                format!("shape {} is not in axis order without repeats", self.shape_text(shape)),
            );
        }
        Ok(())
    }

    /// The union of the operands' shapes, in axis order.
    fn operand_union(&self, v: &Value) -> Shape {
        let mut shape: Shape = v.op.operands().flat_map(|o| self.value(o).shape.clone()).collect();
        shape.sort();
        shape.dedup();
        shape
    }

    fn verify_op(&self, id: ValueId, v: &Value) -> Result<(), VerifyError> {
        let at = Location::Value(id);
        let scalar = |o: ValueId| self.value(o).scalar;
        let expect = |o: ValueId, want: Scalar, role: &str| {
            if scalar(o) == want {
                Ok(())
            } else {
                fail(at, format!("{role} {o} is {}, expected {}", scalar(o).name(), want.name()))
            }
        };
        let numeric = |o: ValueId, role: &str| {
            if scalar(o) == Scalar::Bool {
                fail(at, format!("{role} {o} is a mask, expected a number"))
            } else {
                Ok(())
            }
        };
        let result = |want: Scalar| {
            if v.scalar == want {
                Ok(())
            } else {
                fail(at, format!("is {}, expected {}", v.scalar.name(), want.name()))
            }
        };
        let mask = |m: &Option<ValueId>| m.map_or(Ok(()), |m| expect(m, Scalar::Bool, "mask"));
        let reduced_axis = |axis: AxisId| {
            if !self.axes.is_valid(axis) {
                fail(at, format!("reduces over {axis}, which is not an axis"))
            } else if self.axis(axis).role != AxisRole::Reduced {
                fail(at, format!("reduces over `{}`, which is not a reduced axis", self.axis(axis).name))
            } else {
                Ok(())
            }
        };
        let varies_over = |o: ValueId, axis: AxisId| {
            if self.value(o).shape.contains(&axis) {
                Ok(())
            } else {
                fail(at, format!("{o} does not vary over `{}`", self.axis(axis).name))
            }
        };
        // The shape every op but `broadcast` must have.
        let expected_shape: Shape = match &v.op {
            Op::Range(axis) => {
                if !self.axes.is_valid(*axis) {
                    return fail(at, format!("is a range of {axis}, which is not an axis"));
                }
                result(Scalar::Int)?;
                vec![*axis]
            }
            Op::Const(_) => {
                result(Scalar::Float)?;
                Vec::new()
            }
            Op::ConstInt(_) => {
                result(Scalar::Int)?;
                Vec::new()
            }
            Op::Load { tensor, index, mask: m } => {
                if !self.tensors.is_valid(*tensor) {
                    return fail(at, format!("loads {tensor}, which is not a tensor"));
                }
                let t = self.tensor(*tensor);
                if index.len() != t.shape.len() {
                    return fail(
                        at,
                        format!(
                            "loads {} with {} index tiles for {} dimensions",
                            t.name,
                            index.len(),
                            t.shape.len()
                        ),
                    );
                }
                for &ix in index {
                    expect(ix, Scalar::Int, "index")?;
                }
                mask(m)?;
                result(if t.dtype.is_index() { Scalar::Int } else { Scalar::Float })?;
                self.operand_union(v)
            }
            Op::Unary(op, a) => {
                if let UnaryOp::Func(f) = op
                    && f.arity() != 1
                {
                    return fail(at, format!("`{}` takes {} arguments, not 1", f.name(), f.arity()));
                }
                numeric(*a, "operand")?;
                result(Scalar::Float)?;
                self.operand_union(v)
            }
            Op::Binary(op, a, b) => {
                match op {
                    BinaryOp::And => {
                        expect(*a, Scalar::Bool, "operand")?;
                        expect(*b, Scalar::Bool, "operand")?;
                        result(Scalar::Bool)?;
                    }
                    BinaryOp::Lt | BinaryOp::Ge => {
                        numeric(*a, "operand")?;
                        numeric(*b, "operand")?;
                        result(Scalar::Bool)?;
                    }
                    _ => {
                        numeric(*a, "operand")?;
                        numeric(*b, "operand")?;
                        // Integer arithmetic stays integer (subscripts);
                        // arithmetic on values is in floating point.
                        if !(v.scalar == Scalar::Int
                            && scalar(*a) == Scalar::Int
                            && scalar(*b) == Scalar::Int)
                        {
                            result(Scalar::Float)?;
                        }
                    }
                }
                self.operand_union(v)
            }
            Op::Reduce { value, axis, mask: m, .. } => {
                reduced_axis(*axis)?;
                numeric(*value, "operand")?;
                varies_over(*value, *axis)?;
                mask(m)?;
                result(Scalar::Float)?;
                self.operand_union(v).into_iter().filter(|a| a != axis).collect()
            }
            Op::Dot { a, b, axis, mask: m } => {
                reduced_axis(*axis)?;
                for o in [*a, *b] {
                    numeric(o, "operand")?;
                    varies_over(o, *axis)?;
                }
                mask(m)?;
                result(Scalar::Float)?;
                self.operand_union(v).into_iter().filter(|x| x != axis).collect()
            }
            Op::Broadcast { value } => {
                result(scalar(*value))?;
                let from = &self.value(*value).shape;
                // Eager lowering broadcasts every range, even to its own
                // shape (an axis alone in its role).
                if from.iter().any(|a| !v.shape.contains(a)) {
                    return fail(
                        at,
                        format!(
                            "broadcasts {value} of shape {} to {}, which lacks some of its axes",
                            self.shape_text(from),
                            self.shape_text(&v.shape)
                        ),
                    );
                }
                return Ok(());
            }
            Op::Accumulator => {
                let Some(acc) = &self.accumulate else {
                    return fail(at, "reads the accumulator of a kernel that does not accumulate");
                };
                self.verify_shape(Location::Accumulator, &acc.shape)?;
                result(Scalar::Float)?;
                acc.shape.clone()
            }
        };
        if v.shape != expected_shape {
            return fail(
                at,
                format!(
                    "has shape {}, expected {}",
                    self.shape_text(&v.shape),
                    self.shape_text(&expected_shape)
                ),
            );
        }
        Ok(())
    }

    fn verify_accumulator(&self) -> Result<(), VerifyError> {
        let at = Location::Accumulator;
        let has_value = self.order.iter().any(|&id| self.value(id).op == Op::Accumulator);
        let Some(acc) = &self.accumulate else { return Ok(()) };
        if !self.order.contains(&acc.partial) {
            return fail(at, format!("folds {}, which is not in the body", acc.partial));
        }
        self.verify_shape(at, &acc.shape)?;
        let partial = self.value(acc.partial);
        if partial.scalar == Scalar::Bool {
            return fail(at, format!("folds {}, a mask", acc.partial));
        }
        if partial.shape != acc.shape {
            return fail(
                at,
                format!(
                    "has shape {} but its partial {} has shape {}",
                    self.shape_text(&acc.shape),
                    acc.partial,
                    self.shape_text(&partial.shape)
                ),
            );
        }
        if self.phases()[acc.partial] == Phase::Epilogue {
            return fail(at, format!("folds {}, which reads the accumulator itself", acc.partial));
        }
        if acc.reduction != self.sink.reduction {
            return fail(
                at,
                format!(
                    "folds with {} but the sink with {}",
                    acc.reduction.name(),
                    self.sink.reduction.name()
                ),
            );
        }
        if !has_value {
            return fail(at, "is never read: no `acc` value in the body");
        }
        Ok(())
    }

    fn verify_sink(&self) -> Result<(), VerifyError> {
        let at = Location::Sink;
        let sink = &self.sink;
        if let Some(o) = sink.operands().find(|o| !self.order.contains(o)) {
            return fail(at, format!("reads {o}, which is not in the body"));
        }
        if !self.tensors.is_valid(sink.tensor) {
            return fail(at, format!("writes {}, which is not a tensor", sink.tensor));
        }
        let t = self.tensor(sink.tensor);
        if !t.output {
            return fail(at, format!("writes {}, which is not the output", t.name));
        }
        if sink.index.len() != t.shape.len() {
            return fail(
                at,
                format!(
                    "writes {} with {} index tiles for {} dimensions",
                    t.name,
                    sink.index.len(),
                    t.shape.len()
                ),
            );
        }
        for &ix in &sink.index {
            if self.value(ix).scalar != Scalar::Int {
                return fail(at, format!("index {ix} is {}, expected int", self.value(ix).scalar.name()));
            }
        }
        if self.value(sink.value).scalar == Scalar::Bool {
            return fail(at, format!("writes {}, a mask", sink.value));
        }
        if let Some(m) = sink.mask
            && self.value(m).scalar != Scalar::Bool
        {
            return fail(at, format!("mask {m} is {}, expected bool", self.value(m).scalar.name()));
        }
        if let Some(g) = sink.group {
            if !self.axes.is_valid(g.axis) {
                return fail(at, format!("groups along {}, which is not an axis", g.axis));
            }
            let axis = self.axis(g.axis);
            if !sink.operands().any(|o| self.value(o).shape.contains(&g.axis)) {
                return fail(
                    at,
                    format!("groups along `{}`, which its elements do not vary over", axis.name),
                );
            }
            if !g.lanes.is_power_of_two()
                || g.lanes > Strategy::MAX_LANES
                || !axis.tile.is_multiple_of(g.lanes as usize)
            {
                return fail(
                    at,
                    format!("groups {} lanes along `{}`, whose tile is {}", g.lanes, axis.name, axis.tile),
                );
            }
            if g.kind == GroupKind::Parallel
                && sink.index.iter().any(|&ix| self.value(ix).shape.contains(&g.axis))
            {
                return fail(
                    at,
                    format!("reduces `{}` in parallel, but the target varies over it", axis.name),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `y[i] += A[i, I[r]]`, accumulated: valid, and small enough to break
    /// one line at a time.
    const VALID: &str = "\
kernel k(y: f32[8] out, A: f32[8,4], I: i32[4])
  axes i 8/8 parallel, r 4/4 reduced
  init zero
  program:
    %0 = range i : [i] int
  loop r:
    %1 = range r : [r] int
    %2 = load I[%1] : [r] int
    %3 = load A[%0, %2] : [i,r] float
    %4 = reduce.sum %3 over r : [i] float
    acc sum= %4 : [i]
  epilogue:
    %5 = acc : [i] float
    store y[%0] sum= %5
";

    fn kernel(text: &str) -> Kernel {
        Kernel::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The error of `VALID` with `from` replaced by `to`.
    fn broken(from: &str, to: &str) -> VerifyError {
        assert!(VALID.contains(from), "{from}");
        let k = kernel(&VALID.replacen(from, to, 1));
        k.verify().expect_err(&format!("{k}"))
    }

    #[track_caller]
    fn fires(error: VerifyError, at: &str, reason: &str) {
        assert_eq!(error.at.to_string(), at, "{error}");
        assert!(error.reason.contains(reason), "`{error}` does not say `{reason}`");
    }

    #[test]
    fn the_valid_kernel_and_every_lowered_one_verify() {
        assert_eq!(kernel(VALID).verify(), Ok(()));
        assert_eq!(kernel(VALID).to_string(), VALID);
    }

    #[test]
    fn tables() {
        fires(broken("i 8/8", "i 8/6"), "axis 0", "tile 6 is not a power of two");
        fires(broken("y: f32[8] out", "y: f32[8]"), "kernel", "0 output tensors");
        let text = VALID.replace("axes i 8/8 parallel, r 4/4 reduced", "axes r 4/4 reduced, i 8/8 parallel");
        fires(kernel(&text).verify().unwrap_err(), "axis 1", "a parallel axis after a reduced one");
        let mut k = kernel(VALID);
        k.axes[AxisId::from_u32(1)].name = "i".into();
        fires(k.verify().unwrap_err(), "axis 1", "a second axis named `i`");
        let mut k = kernel(VALID);
        k.tensors[TensorId::from_u32(2)].name = "A".into();
        fires(k.verify().unwrap_err(), "tensor 2", "a second tensor named `A`");
    }

    #[test]
    fn operands_come_before_their_users() {
        let swapped = VALID.replace(
            "    %2 = load I[%1] : [r] int\n    %3 = load A[%0, %2] : [i,r] float\n",
            "    %3 = load A[%0, %2] : [i,r] float\n    %2 = load I[%1] : [r] int\n",
        );
        fires(kernel(&swapped).verify().unwrap_err(), "%3", "reads %2, which is computed after it");
        let mut k = kernel(VALID);
        k.order.push(ValueId::from_u32(2));
        fires(k.verify().unwrap_err(), "%2", "appears twice in the body");
        let mut k = kernel(VALID);
        k.order.push(ValueId::from_u32(40));
        fires(k.verify().unwrap_err(), "%40", "not in the value arena");
        let mut k = kernel(VALID);
        let Op::Load { index, .. } = &mut k.values[ValueId::from_u32(3)].op else { unreachable!() };
        index[1] = ValueId::from_u32(40);
        fires(k.verify().unwrap_err(), "%3", "reads %40, which is not a value");
    }

    #[test]
    fn shapes() {
        fires(broken("[i,r] float", "[r,i] float"), "%3", "shape [r,i] is not in axis order");
        fires(broken("[i,r] float", "[i,i,r] float"), "%3", "not in axis order without repeats");
        fires(broken("[i,r] float", "[i] float"), "%3", "has shape [i], expected [i,r]");
        fires(broken("%0 = range i : [i] int", "%0 = range i : [r] int"), "%0", "expected [i]");
        fires(
            broken("%4 = reduce.sum %3 over r : [i]", "%4 = reduce.sum %3 over r : [i,r]"),
            "%4",
            "expected [i]",
        );
        let mut k = kernel(VALID);
        k.values[ValueId::from_u32(0)].shape = vec![AxisId::from_u32(7)];
        fires(k.verify().unwrap_err(), "%0", "shape names axis7, which is not an axis");
        let narrowed = "    %3 = load A[%0, %2] : [i,r] float\n    %6 = broadcast %3 : [r] float\n";
        fires(
            broken("    %3 = load A[%0, %2] : [i,r] float\n", narrowed),
            "%6",
            "which lacks some of its axes",
        );
    }

    #[test]
    fn scalar_types() {
        fires(
            broken("%2 = load I[%1] : [r] int", "%2 = load I[%1] : [r] float"),
            "%2",
            "is float, expected int",
        );
        let text =
            VALID.replace("I: i32[4]", "I: f32[4]").replace("load I[%1] : [r] int", "load I[%1] : [r] float");
        fires(kernel(&text).verify().unwrap_err(), "%3", "index %2 is float, expected int");
        fires(broken("over r : [i]", "over r mask %2 : [i]"), "%4", "mask %2 is int, expected bool");
        fires(broken("%3 = load A[%0, %2]", "%3 = load A[%0]"), "%3", "1 index tiles for 2 dimensions");
        let masks =
            "    %1 = range r : [r] int\n    %6 = lt %1, %1 : [r] bool\n    %7 = add %6, %6 : [r] float\n";
        fires(broken("    %1 = range r : [r] int\n", masks), "%7", "operand %6 is a mask");
        let and = "    %1 = range r : [r] int\n    %6 = and %1, %1 : [r] bool\n";
        fires(broken("    %1 = range r : [r] int\n", and), "%6", "operand %1 is int, expected bool");
        let mut k = kernel(VALID);
        let id = k.values.push(Value {
            op: Op::Unary(UnaryOp::Func(crate::lang::Func::Max), ValueId::from_u32(3)),
            shape: k.value(ValueId::from_u32(3)).shape.clone(),
            scalar: Scalar::Float,
        });
        k.order.insert(4, id);
        fires(k.verify().unwrap_err(), "%6", "`max` takes 2 arguments, not 1");
    }

    #[test]
    fn reductions_run_over_a_reduced_axis_their_inputs_vary_over() {
        fires(
            broken("reduce.sum %3 over r", "reduce.sum %3 over i"),
            "%4",
            "`i`, which is not a reduced axis",
        );
        fires(
            broken("reduce.sum %3 over r : [i]", "reduce.sum %0 over r : [i]"),
            "%4",
            "%0 does not vary over `r`",
        );
        let dot = "%4 = dot %3, %0 over r : [i] float";
        fires(broken("%4 = reduce.sum %3 over r : [i] float", dot), "%4", "%0 does not vary over `r`");
    }

    #[test]
    fn sink_groups() {
        let grouped = |group: &str| kernel(&VALID.replace("sum= %5\n", &format!("sum= %5 {group}\n")));
        assert_eq!(grouped("segment(8) over i").verify(), Ok(()));
        assert_eq!(grouped("segment(2) over i").verify(), Ok(()));
        fires(
            grouped("segment(16) over i").verify().unwrap_err(),
            "sink",
            "16 lanes along `i`, whose tile is 8",
        );
        fires(grouped("segment(3) over i").verify().unwrap_err(), "sink", "3 lanes");
        fires(
            grouped("segment(4) over r").verify().unwrap_err(),
            "sink",
            "which its elements do not vary over",
        );
        fires(grouped("parallel(4) over i").verify().unwrap_err(), "sink", "the target varies over it");
    }

    #[test]
    fn accumulator_and_sink() {
        fires(broken("    acc sum= %4 : [i]\n", ""), "%5", "a kernel that does not accumulate");
        fires(
            broken("acc sum= %4 : [i]", "acc max= %4 : [i]"),
            "accumulator",
            "folds with max but the sink with sum",
        );
        let text =
            VALID.replace("acc sum= %4 : [i]", "acc sum= %4 : []").replace("%5 = acc : [i]", "%5 = acc : []");
        fires(kernel(&text).verify().unwrap_err(), "accumulator", "its partial %4 has shape [i]");
        fires(broken("%5 = acc : [i]", "%5 = acc : []"), "%5", "has shape [], expected [i]");
        let reads_itself = "    %5 = acc : [i] float\n    %6 = neg %5 : [i] float\n";
        let text =
            VALID.replace("    %5 = acc : [i] float\n", reads_itself).replace("acc sum= %4", "acc sum= %6");
        fires(kernel(&text).verify().unwrap_err(), "accumulator", "reads the accumulator itself");
        let text = VALID.replace("    %5 = acc : [i] float\n", "").replace("sum= %5", "sum= %4");
        fires(kernel(&text).verify().unwrap_err(), "accumulator", "no `acc` value in the body");
        let mut k = kernel(VALID);
        k.values.push(Value {
            op: Op::Accumulator,
            shape: k.value(ValueId::from_u32(5)).shape.clone(),
            scalar: Scalar::Float,
        });
        k.order.push(ValueId::from_u32(6));
        fires(k.verify().unwrap_err(), "kernel", "2 accumulator values");

        fires(broken("store y[%0]", "store A[%0, %0]"), "sink", "writes A, which is not the output");
        fires(broken("store y[%0]", "store y[%0, %0]"), "sink", "2 index tiles for 1 dimensions");
        fires(
            broken("store y[%0] sum= %5", "store y[%0] sum= %5 mask %0"),
            "sink",
            "mask %0 is int, expected bool",
        );
        fires(
            broken("store y[%0] sum= %5", "store y[%3] sum= %5"),
            "sink",
            "index %3 is float, expected int",
        );
        let mut k = kernel(VALID);
        k.sink.value = k.values.push(k.value(ValueId::from_u32(5)).clone());
        fires(k.verify().unwrap_err(), "sink", "reads %6, which is not in the body");
    }
}
