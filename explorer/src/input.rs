//! Reading the tensor a command works on: a file, or a generator spec.

use std::time::Instant;

use anyhow::Result;
use spindle_formats::generate::GeneratorSpec;
use spindle_formats::{Coo, IType, Index, Value};

/// A tensor read or generated, with where it came from.
#[derive(Debug)]
pub struct Loaded<V, I> {
    pub coo: Coo<V, I>,
    pub name: String,
    pub seconds: f64,
}

/// `gen:SPEC` runs a generator, `kernelmap:FILE.xyz:voxel=V[,kernel=K]`
/// builds a point cloud's kernel map; anything else is a `.mtx` / `.tns`
/// path. Entries come back in file order (not canonicalized).
pub fn load<V: Value, I: Index>(input: &str) -> Result<Loaded<V, I>> {
    // Where i32 indices fail and i64 ones read it, say so (the commands
    // that load a tensor take --itype): a file's reader reports the
    // overflow as a parse error of its line, so the retry is the test.
    read::<V, I>(input).map_err(|e| {
        if I::ITYPE == IType::I32 && read::<V, i64>(input).is_ok() {
            anyhow::anyhow!("{e:#} (it reads with --itype i64)")
        } else {
            e
        }
    })
}

fn read<V: Value, I: Index>(input: &str) -> Result<Loaded<V, I>> {
    let start = Instant::now();
    let (coo, name) = match (input.strip_prefix("gen:"), input.strip_prefix("kernelmap:")) {
        (Some(spec), _) => {
            let spec: GeneratorSpec = spec.parse()?;
            (spec.generate()?, spec.to_string())
        }
        (_, Some(spec)) => {
            let map = spindle::input::kernel_map(spec)?;
            (map.cast()?, format!("kernel map {spec}"))
        }
        (None, None) => {
            let path = std::path::Path::new(input);
            // Its errors name the file (and the line).
            let coo = spindle_formats::io::read_tensor(path)?;
            let name = path.file_name().map_or(input.to_string(), |n| n.to_string_lossy().into_owned());
            (coo, name)
        }
    };
    Ok(Loaded { coo, name, seconds: start.elapsed().as_secs_f64() })
}

/// Calls `$f::<V, I>($args)` for the value and index types chosen at run
/// time.
#[macro_export]
macro_rules! with_types {
    ($types:expr, $f:ident ( $($arg:expr),* )) => {{
        use $crate::{IndexType as It, ValueType as Vt};
        match ($types.dtype, $types.itype) {
            (Vt::F64, It::I32) => $f::<f64, i32>($($arg),*),
            (Vt::F64, It::I64) => $f::<f64, i64>($($arg),*),
            (Vt::F32, It::I32) => $f::<f32, i32>($($arg),*),
            (Vt::F32, It::I64) => $f::<f32, i64>($($arg),*),
            (Vt::F16, It::I32) => $f::<half::f16, i32>($($arg),*),
            (Vt::F16, It::I64) => $f::<half::f16, i64>($($arg),*),
            (Vt::Bf16, It::I32) => $f::<half::bf16, i32>($($arg),*),
            (Vt::Bf16, It::I64) => $f::<half::bf16, i64>($($arg),*),
        }
    }};
}
