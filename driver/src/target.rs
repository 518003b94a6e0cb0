//! Where kernels run.

use std::fmt;
use std::str::FromStr;

/// A backend a kernel can be compiled for and run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// C11 + OpenMP, compiled with the system C compiler; runs everywhere.
    C,
    /// CUDA C compiled by NVRTC; running needs an NVIDIA GPU and its driver.
    Cuda,
    /// The printed CUDA kernel run on the CPU (one thread per CUDA thread,
    /// under a sanitizer): for testing GPU kernels without a GPU.
    Emulate,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::C, Target::Cuda, Target::Emulate];

    /// The name in prose: `C`, `CUDA`, `CUDA emulation`.
    pub fn title(self) -> &'static str {
        match self {
            Target::C => "C",
            Target::Cuda => "CUDA",
            Target::Emulate => "CUDA emulation",
        }
    }

    /// The name on the command line: `c`, `cuda`, `emulate`.
    pub fn name(self) -> &'static str {
        match self {
            Target::C => "c",
            Target::Cuda => "cuda",
            Target::Emulate => "emulate",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s.to_ascii_lowercase())
            .ok_or_else(|| format!("unknown target `{s}` (c, cuda, emulate)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_print_and_parse() {
        for t in Target::ALL {
            assert_eq!(t.to_string().parse::<Target>(), Ok(t));
        }
        assert_eq!("CUDA".parse::<Target>(), Ok(Target::Cuda));
        assert_eq!("gpu".parse::<Target>().unwrap_err(), "unknown target `gpu` (c, cuda, emulate)");
    }
}
