//! One printer for the C family. The C and CUDA printers print a value's
//! element, a tensor element's address, functions, folds and literals with
//! the same code ([`Scope`]'s provided methods); a [`Dialect`] says what C11
//! and CUDA C++ spell differently (types, literals, conversions at loads,
//! index widths). What stays in each backend is the program's structure:
//! ranges of programs on OpenMP threads for C; thread blocks, shared tiles,
//! barriers and Tensor Cores for CUDA.
//!
//! Which values are printed as expressions and which get an array is the
//! kernel IR's analysis ([`Uses::inline`](spindle_ir::kernel::Uses::inline)),
//! and identifiers come from one [`Names`] table, so both backends name and
//! inline alike.

use spindle_ir::formats::DType;
use spindle_ir::kernel::*;
use spindle_ir::lang::{ElemType, Func};

use crate::namer::Names;

/// What one language of the C family spells its own way.
pub trait Dialect {
    /// The type values are computed in: `float`, or `double` when a tensor
    /// of the kernel is f64.
    fn real(&self) -> &'static str;
    /// The type of index arithmetic.
    fn int_type(&self) -> &'static str;
    fn bool_type(&self) -> &'static str;
    /// A literal for +∞ (`negative`: −∞) in the compute type.
    fn infinity(&self, negative: bool) -> String;
    /// An integer literal.
    fn int(&self, c: i64) -> String;
    /// `array[address]`, an element of a tensor of `dtype`, converted to
    /// the compute type.
    fn load(&self, dtype: ElemType, array: &str, address: &str) -> String;
    /// `index * stride`, in the width addresses are computed in.
    fn scaled(&self, index: &str, stride: usize) -> String;

    /// A load where `mask` holds and 0 elsewhere. `empty`: the tensor has
    /// no elements, so no address is safe to read.
    fn masked_load(
        &self,
        mask: &str,
        dtype: ElemType,
        array: &str,
        address: &str,
        scalar: Scalar,
        empty: bool,
    ) -> String {
        let _ = empty;
        format!("({mask} ? {} : {})", self.load(dtype, array, address), self.zero(scalar))
    }

    /// The suffix of single-precision math functions (`expf`).
    fn math_suffix(&self) -> &'static str {
        if self.real() == "float" { "f" } else { "" }
    }

    /// A literal in the compute type, infinities included.
    fn float(&self, x: f64) -> String {
        if x.is_infinite() { self.infinity(x < 0.0) } else { format!("{x:?}{}", self.math_suffix()) }
    }

    fn zero(&self, scalar: Scalar) -> String {
        match scalar {
            Scalar::Float => self.float(0.0),
            Scalar::Int | Scalar::Bool => "0".into(),
        }
    }

    fn scalar_type(&self, scalar: Scalar) -> &'static str {
        match scalar {
            Scalar::Float => self.real(),
            Scalar::Int => self.int_type(),
            Scalar::Bool => self.bool_type(),
        }
    }

    fn func(&self, f: Func, x: &str) -> String {
        let s = self.math_suffix();
        let (zero, one) = (self.float(0.0), self.float(1.0));
        match f {
            Func::Exp => format!("exp{s}({x})"),
            Func::Sqrt => format!("sqrt{s}({x})"),
            Func::Abs => format!("fabs{s}({x})"),
            // A select, which vectorizes, and is 0 for NaN like fmax.
            Func::Relu => format!("({x} > {zero} ? {x} : {zero})"),
            Func::Sigmoid => format!("({one} / ({one} + exp{s}(-{x})))"),
            Func::Max | Func::Min => unreachable!("binary functions are binary ops"),
        }
    }

    /// `x op y` of values of `scalar` type.
    fn binary(&self, op: BinaryOp, x: &str, y: &str, scalar: Scalar) -> String {
        let s = self.math_suffix();
        match op {
            BinaryOp::Add => format!("({x} + {y})"),
            BinaryOp::Sub => format!("({x} - {y})"),
            BinaryOp::Mul => format!("({x} * {y})"),
            BinaryOp::Div => format!("(({}){x} / {y})", self.scalar_type(scalar)),
            BinaryOp::Max => format!("fmax{s}({x}, {y})"),
            BinaryOp::Min => format!("fmin{s}({x}, {y})"),
            BinaryOp::Lt => format!("({x} < {y})"),
            BinaryOp::Ge => format!("({x} >= {y})"),
            BinaryOp::And => format!("({x} && {y})"),
        }
    }

    /// `target op= value` as one atomic read-modify-write of an element of
    /// type `dtype` that other threads update too; `None` where the
    /// language has no atomics (C: its threads own their output elements).
    fn atomic_fold(&self, r: Reduction, dtype: ElemType, target: &str, value: &str) -> Option<String> {
        let _ = (r, dtype, target, value);
        None
    }

    /// The type a tensor of `dtype` is stored in.
    fn storage(&self, dtype: ElemType) -> &'static str {
        crate::print::c_type(dtype)
    }

    /// A compute-type value converted to a tensor's element type, for a
    /// store (C converts by assignment).
    fn store_as(&self, dtype: ElemType, value: &str) -> String {
        let _ = dtype;
        value.to_string()
    }

    /// `target op= value` for a reduction, as a statement.
    fn fold(&self, r: Reduction, target: &str, value: &str) -> String {
        let s = self.math_suffix();
        match r {
            Reduction::Sum => format!("{target} += {value};"),
            Reduction::Max => format!("{target} = fmax{s}({target}, {value});"),
            Reduction::Min => format!("{target} = fmin{s}({target}, {value});"),
        }
    }
}

/// The compute type of a kernel: `double` when a tensor is f64.
pub fn real_of(k: &Kernel) -> &'static str {
    let double = k.tensors.values().any(|t| t.dtype == ElemType::Value(DType::F64));
    if double { "double" } else { "float" }
}

/// C11. Tensors arrive in the compute type (f16 and bf16 are converted at
/// the boundary), indices are `int64_t`.
#[derive(Clone, Copy, Debug)]
pub struct C {
    pub real: &'static str,
}

impl Dialect for C {
    fn real(&self) -> &'static str {
        self.real
    }

    fn int_type(&self) -> &'static str {
        "int64_t"
    }

    fn bool_type(&self) -> &'static str {
        "unsigned char"
    }

    fn infinity(&self, negative: bool) -> String {
        if negative { "-INFINITY".into() } else { "INFINITY".into() }
    }

    fn int(&self, c: i64) -> String {
        format!("(int64_t){c}")
    }

    fn load(&self, _dtype: ElemType, array: &str, address: &str) -> String {
        format!("{array}[{address}]")
    }

    fn scaled(&self, index: &str, stride: usize) -> String {
        format!("{index} * {stride}")
    }

    /// Reads a safe element unconditionally and selects 0 where the mask is
    /// off: a contiguous load and a blend, which vectorize, instead of a
    /// masked gather (see [`select_helpers`]).
    fn masked_load(
        &self,
        mask: &str,
        _dtype: ElemType,
        array: &str,
        address: &str,
        scalar: Scalar,
        empty: bool,
    ) -> String {
        if empty {
            return format!("({mask} ? {array}[{address}] : 0)");
        }
        let kind = self.scalar_type(scalar).replace(' ', "_");
        format!("select_{kind}({mask}, {array}[{mask} ? {address} : 0])")
    }
}

/// The `select_T` functions C's masked loads call.
pub fn select_helpers() -> String {
    ["float", "double", "int64_t"]
        .iter()
        .map(|kind| {
            format!("static inline {kind} select_{kind}(unsigned char m, {kind} x) {{ return m ? x : 0; }}\n")
        })
        .collect()
}

/// A printer's view of the kernel where it prints an element: its dialect,
/// its names, which values are inline and where the others live. The
/// provided methods are the shared printer.
pub trait Scope {
    type Dialect: Dialect;

    fn kernel(&self) -> &Kernel;
    fn dialect(&self) -> &Self::Dialect;
    fn names(&self) -> &Names;
    /// Whether a value is printed as an expression where it is read.
    fn inlined(&self, id: ValueId) -> bool;
    /// The element of a materialized value (a tile, the accumulator) at the
    /// current loop variables.
    fn array(&self, id: ValueId) -> String;

    /// The loop variable of an axis inside its tile.
    fn axis_var(&self, a: AxisId) -> String {
        format!("i_{}", self.names().axes[a])
    }

    /// The variable holding the current tile of an axis.
    fn tile_var(&self, a: AxisId) -> String {
        format!("t_{}", self.names().axes[a])
    }

    /// A value's element where the loop variables of (at least) its axes
    /// are bound: the inlined expression, or a read of its array.
    fn elem(&self, id: ValueId) -> String {
        if self.inlined(id) { self.expr(id) } else { self.array(id) }
    }

    /// One element of a value, as an expression of the loop variables.
    fn expr(&self, id: ValueId) -> String {
        let (k, d) = (self.kernel(), self.dialect());
        let value = k.value(id);
        match &value.op {
            Op::Range(a) => {
                let (t, tile, i) = (self.tile_var(*a), k.axis(*a).tile, self.axis_var(*a));
                if tile == 1 { t } else { format!("({t} * {tile} + {i})") }
            }
            Op::Const(c) => d.float(c.0),
            Op::ConstInt(c) => d.int(*c),
            Op::Load { tensor, index, mask } => {
                let t = k.tensor(*tensor);
                let (array, address) = (&self.names().tensors[*tensor], self.address(*tensor, index));
                match mask {
                    None => d.load(t.dtype, array, &address),
                    Some(m) => {
                        let empty = t.shape.iter().product::<usize>() == 0;
                        d.masked_load(&self.elem(*m), t.dtype, array, &address, value.scalar, empty)
                    }
                }
            }
            Op::Unary(UnaryOp::Neg, a) => format!("(-{})", self.elem(*a)),
            Op::Unary(UnaryOp::Func(f), a) => d.func(*f, &self.elem(*a)),
            Op::Binary(op, a, b) => d.binary(*op, &self.elem(*a), &self.elem(*b), value.scalar),
            Op::Broadcast { value: a } => self.elem(*a),
            Op::Accumulator => self.array(id),
            Op::Reduce { .. } | Op::Dot { .. } => unreachable!("reductions are always materialized"),
        }
    }

    /// The flat offset of a tensor element.
    fn address(&self, tensor: TensorId, index: &[ValueId]) -> String {
        self.address_without(tensor, index, None)
    }

    /// The flat offset in the tensor with dimension `skip` removed (the
    /// place of an element in a buffer of one row).
    fn address_without(&self, tensor: TensorId, index: &[ValueId], skip: Option<usize>) -> String {
        let dims = &self.kernel().tensor(tensor).shape;
        let mut terms = Vec::new();
        for (d, &ix) in index.iter().enumerate() {
            if Some(d) == skip {
                continue;
            }
            let stride: usize = dims
                .iter()
                .enumerate()
                .skip(d + 1)
                .filter(|&(e, _)| Some(e) != skip)
                .map(|(_, n)| n)
                .product();
            let e = self.elem(ix);
            terms.push(if stride == 1 { e } else { self.dialect().scaled(&e, stride) });
        }
        if terms.is_empty() { "0".to_string() } else { terms.join(" + ") }
    }
}
