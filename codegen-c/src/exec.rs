//! Running a kernel on tensor data: print, compile (cached), fill the
//! buffers, launch, and read the output back.

use ndarray::ArrayD;
use spindle_ir::kernel::{Kernel, OutputInit, TensorParam};
use spindle_ir::lang::ElemType;
use spindle_ir::tensor::{TensorValue, Tensors};

use crate::compile::{CProgram, CompileError, Compiler};
use crate::print::{Options, PrintError, print_with};
use crate::runtime::{Buffer, BufferKind, RunError};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Print(#[from] PrintError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Data(String),
}

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct CKernel {
    pub kernel: Kernel,
    pub source: String,
    pub program: CProgram,
}

/// The symbol every printed kernel is exported as.
pub const SYMBOL: &str = "spindle_kernel";

impl CKernel {
    pub fn compile(kernel: &Kernel) -> Result<CKernel, BackendError> {
        CKernel::compile_with(kernel, &Compiler::from_env())
    }

    pub fn compile_with(kernel: &Kernel, compiler: &Compiler) -> Result<CKernel, BackendError> {
        CKernel::compile_with_options(kernel, compiler, &Options::default())
    }

    /// Compiles with explicit printer [`Options`] (e.g. `serial_work: 0`
    /// to run even a small kernel on several threads).
    pub fn compile_with_options(
        kernel: &Kernel,
        compiler: &Compiler,
        options: &Options,
    ) -> Result<CKernel, BackendError> {
        let source = print_with(kernel, SYMBOL, options)?;
        let kinds = kernel.tensors.values().map(|t| BufferKind::for_elem(t.dtype)).collect();
        let program = compiler.compile(&source, SYMBOL)?.with_signature(kinds);
        Ok(CKernel { kernel: kernel.clone(), source, program })
    }

    /// The buffers of a run, in argument order, the output prepared as the
    /// kernel's [`OutputInit`] says. Index tensors are checked first.
    pub fn buffers(&self, tensors: &Tensors) -> Result<Vec<Buffer>, BackendError> {
        self.kernel.check_indices(tensors).map_err(BackendError::Data)?;
        buffers(self.kernel.tensors.values(), self.kernel.init, tensors)
    }

    /// Launches on prepared buffers (for timing: no checks, no copies).
    pub fn launch(&self, buffers: &mut [Buffer], threads: usize) -> Result<(), BackendError> {
        Ok(self.program.run(buffers, threads)?)
    }

    /// The output read back from the buffers, in f64, rounded to its dtype;
    /// for `max=` / `min=` without data, entries no program reached are 0.
    pub fn output(&self, buffers: &[Buffer], had_data: bool) -> Result<ArrayD<f64>, BackendError> {
        output(self.kernel.tensors.values(), self.kernel.init, buffers, had_data)
    }

    /// Runs once on `tensors` and returns the output.
    pub fn run(&self, tensors: &Tensors, threads: usize) -> Result<ArrayD<f64>, BackendError> {
        let mut buffers = self.buffers(tensors)?;
        self.launch(&mut buffers, threads)?;
        let out = self.kernel.tensors.values().find(|t| t.output).map(|t| t.name.clone()).unwrap_or_default();
        self.output(&buffers, tensors.contains_key(&out))
    }
}

/// The buffers of a run of a kernel with these arguments, in order, the
/// output prepared as `init` says.
pub fn buffers<'a>(
    params: impl Iterator<Item = &'a TensorParam>,
    init: OutputInit,
    tensors: &Tensors,
) -> Result<Vec<Buffer>, BackendError> {
    let mut buffers = Vec::new();
    for t in params {
        let len: usize = t.shape.iter().product();
        let buffer = match (t.dtype, tensors.get(&t.name)) {
            (ElemType::Value(d), _) if t.output => {
                let start = match (init, tensors.get(&t.name)) {
                    (OutputInit::Zero, _) | (OutputInit::Keep, None) => vec![0.0; len],
                    (OutputInit::Identity(r), None) => vec![r.identity(); len],
                    (_, Some(data)) => values(data),
                };
                Buffer::from_f64(&start, d)
            }
            (ElemType::Value(d), Some(data)) => Buffer::from_f64(&values(data), d),
            (ElemType::Index(i), Some(TensorValue::Indices(data))) => {
                Buffer::from_i64(&data.iter().copied().collect::<Vec<_>>(), i)?
            }
            (ElemType::Index(_), Some(TensorValue::Values(_))) => {
                return Err(BackendError::Data(format!(
                    "{} is an index tensor but its data are values",
                    t.name
                )));
            }
            (_, None) => return Err(BackendError::Data(format!("no data given for tensor {}", t.name))),
        };
        if buffer.len() != len {
            return Err(BackendError::Data(format!(
                "data for {} has {} elements, not {len}",
                t.name,
                buffer.len()
            )));
        }
        buffers.push(buffer);
    }
    Ok(buffers)
}

/// The output of a run read back from `buffers`, in f64, rounded to its
/// dtype; for `max=` / `min=` without data, entries nothing reached are 0.
pub fn output<'a>(
    params: impl Iterator<Item = &'a TensorParam>,
    init: OutputInit,
    buffers: &[Buffer],
    had_data: bool,
) -> Result<ArrayD<f64>, BackendError> {
    let (at, t) = params.enumerate().find(|(_, t)| t.output).expect("a kernel has an output");
    let ElemType::Value(dtype) = t.dtype else { unreachable!("outputs hold values") };
    let mut data = buffers[at].to_f64_as(dtype);
    if let (OutputInit::Identity(r), false) = (init, had_data) {
        data.iter_mut().filter(|x| **x == r.identity()).for_each(|x| *x = 0.0);
    }
    ArrayD::from_shape_vec(t.shape.clone(), data).map_err(|e| BackendError::Data(e.to_string()))
}

/// Tensor data as f64 values (integer data read as values).
fn values(data: &TensorValue) -> Vec<f64> {
    match data {
        TensorValue::Values(a) => a.iter().copied().collect(),
        TensorValue::Indices(a) => a.iter().map(|&x| x as f64).collect(),
    }
}
