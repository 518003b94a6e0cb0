//! What a cell shows beside its timings: the format view of each sparse
//! tensor and the NVRTC resource report.

use std::collections::BTreeSet;

use spindle_formats::{Coo, DType, FormatSpec, SparseTensor};
use spindle_ir::lang::ElemType;

use crate::notebook::cell::{CellProgram, ResourceMode, SweepParam};
use crate::notebook::output::{FormatView, ResourceRow};

use super::*;

impl Run<'_> {
    pub(super) fn nvrtc_plan(&mut self, program: &CellProgram, points: usize) -> usize {
        if self.options.skip_nvrtc || program.resources == ResourceMode::Off {
            return 0;
        }
        match spindle_cuda::nvrtc::Toolchain::locate() {
            Ok(_) => match program.resources {
                ResourceMode::All => points,
                _ => 1,
            },
            Err(_) => {
                self.out.notes.push(
                    "CUDA toolchain missing: run `cargo xtask setup-cuda` for the NVRTC resource report"
                        .into(),
                );
                0
            }
        }
    }

    pub(super) fn format_views(&mut self, program: &CellProgram, data: &Data, points: &[Point]) -> Step<()> {
        let mut names: Vec<String> = program.formats.iter().map(|f| f.tensor.value.clone()).collect();
        for s in &program.sweeps {
            if let SweepParam::Format(t) = &s.param.value
                && !names.contains(t)
            {
                names.push(t.clone());
            }
        }
        for name in names {
            let Some(coo) = data.sparse.get(&name) else { continue };
            let dtype = match data.declarations.get(&name).map(|d| d.dtype) {
                Some(ElemType::Value(d)) => d,
                _ => DType::F32,
            };
            let only = BTreeSet::from([name.clone()]);
            let mut specs: Vec<FormatSpec> = Vec::new();
            for point in points {
                if let Some(spec) = self.point_formats(program, &only, point).remove(&name)
                    && !specs.contains(&spec)
                {
                    specs.push(spec);
                }
            }
            let Some(first) = specs.first() else { continue };
            let (spec, stats) = match format_stats(coo, first, dtype) {
                Ok(s) => s,
                Err(e) => {
                    self.out.notes.push(format!("format view of {name}: {e}"));
                    continue;
                }
            };
            let mut per_g: Vec<(usize, usize, f64)> = Vec::new();
            for s in specs.iter().filter(|s| is_group(s)) {
                if let Ok((resolved, st)) = format_stats(coo, s, dtype)
                    && let Some(g) = group_size(&resolved)
                    && !per_g.iter().any(|(h, _, _)| *h == g)
                {
                    per_g.push((g, st.bytes, st.padding_ratio));
                }
            }
            per_g.sort_by_key(|r| r.0);
            self.out.formats.push(FormatView { tensor: name, spec: spec.to_string(), stats, per_g });
        }
        Ok(())
    }

    pub(super) fn resources(
        &mut self,
        program: &CellProgram,
        points: &[Point],
        kernels: &[(String, Vec<Option<KernelText>>)],
    ) -> Step<()> {
        let wanted = match program.resources {
            _ if self.options.skip_nvrtc => return Ok(()),
            ResourceMode::Off => return Ok(()),
            ResourceMode::First => 1,
            ResourceMode::All => points.len(),
        };
        if spindle_cuda::nvrtc::Toolchain::locate().is_err() {
            return Ok(());
        }
        for (tag, list) in kernels {
            for k in list.iter().flatten().take(wanted) {
                self.step(format!("{tag}{}: NVRTC for sm_90", k.point))?;
                let Some((kernel, schedule)) = &k.kernel else { continue };
                let arch = spindle_cuda::nvrtc::Arch::Sm90;
                match spindle::cuda_report(kernel, schedule, arch) {
                    Ok(report) => {
                        // The kernel's own function (the printer may add helpers).
                        let r = report
                            .resources
                            .iter()
                            .find(|(name, _)| name == spindle::backend::SYMBOL)
                            .or(report.resources.first())
                            .map(|(_, r)| *r)
                            .unwrap_or_default();
                        self.out.resources.push(ResourceRow {
                            point: format!("{tag}{}", k.point),
                            arch: arch.as_str().into(),
                            registers: r.registers,
                            shared_bytes: r.shared_mem_bytes,
                            stack_bytes: r.stack_bytes,
                            spill_bytes: r.spill_stores_bytes + r.spill_loads_bytes,
                            launch: format!("{} x {}", report.launch.grid, report.launch.block),
                        });
                    }
                    Err(e) => {
                        let first = e.to_string().lines().next().unwrap_or_default().to_string();
                        self.out.notes.push(format!("NVRTC ({tag}{}): {first}", k.point));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Statistics of `coo` stored in `spec` (values of `dtype`, i32 indices),
/// with the spec as resolved (g=auto replaced by its choice).
pub(super) fn format_stats(
    coo: &Coo<f64, i64>,
    spec: &FormatSpec,
    dtype: DType,
) -> spindle_formats::Result<(FormatSpec, spindle_formats::Stats)> {
    pub(super) fn go<V: spindle_formats::Value>(
        coo: &Coo<f64, i64>,
        spec: &FormatSpec,
    ) -> spindle_formats::Result<(FormatSpec, spindle_formats::Stats)> {
        let stats = SparseTensor::<V, i32>::stats_of(&coo.cast::<V, i32>()?, spec)?;
        Ok((stats.format.parse()?, stats))
    }
    match dtype {
        DType::F64 => go::<f64>(coo, spec),
        DType::F32 => go::<f32>(coo, spec),
        DType::F16 => go::<half::f16>(coo, spec),
        DType::Bf16 => go::<half::bf16>(coo, spec),
    }
}
