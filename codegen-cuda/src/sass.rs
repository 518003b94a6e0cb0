//! The machine code of a compiled kernel, read with `cuobjdump -sass` (from
//! the `nvidia-cuda-cuobjdump` wheel `cargo xtask setup-cuda` installs
//! beside NVRTC), so tests can assert what the hardware will run: 16-byte
//! loads, Tensor Core instructions, no atomics inside a loop. No GPU is
//! needed.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::nvrtc::Toolchain;

/// One instruction: its byte offset in the function and its text
/// (predicate, opcode, operands).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub offset: u64,
    pub text: String,
}

impl Instruction {
    /// The opcode with its modifiers (`LDG.E.128`), after any predicate.
    pub fn opcode(&self) -> &str {
        let mut words = self.text.split_whitespace();
        let first = words.next().unwrap_or("");
        let op = if first.starts_with('@') { words.next().unwrap_or("") } else { first };
        op.trim_end_matches(';')
    }

    fn predicated(&self) -> bool {
        self.text.starts_with('@') && !self.text.starts_with("@PT")
    }

    /// The target of a branch given as an offset (`BRA 0x1a0`).
    fn branch_target(&self) -> Option<u64> {
        if !self.opcode().starts_with("BRA") {
            return None;
        }
        let target = self.text.split_whitespace().find(|w| w.starts_with("0x") || w.starts_with("`(0x"))?;
        let hex = target.trim_start_matches("`(").trim_start_matches("0x").trim_end_matches([')', ';']);
        u64::from_str_radix(hex, 16).ok()
    }
}

/// The instructions of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sass {
    pub function: String,
    pub instructions: Vec<Instruction>,
}

/// Why the machine code could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SassError {
    #[error("cuobjdump is not installed at {0} (`cargo xtask setup-cuda` installs it)")]
    Missing(PathBuf),
    #[error("cuobjdump failed: {0}")]
    Failed(String),
    #[error("no function `{0}` in the machine code")]
    NoFunction(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// `cuobjdump` of a toolchain.
pub fn cuobjdump(toolchain: &Toolchain) -> PathBuf {
    toolchain.root().join("bin").join("cuobjdump")
}

/// The SASS of `function` in `cubin`.
pub fn disassemble(toolchain: &Toolchain, cubin: &[u8], function: &str) -> Result<Sass, SassError> {
    let tool = cuobjdump(toolchain);
    if !tool.is_file() {
        return Err(SassError::Missing(tool));
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("spindle-sass-{}-{n}.cubin", std::process::id()));
    std::fs::write(&path, cubin)?;
    // cuobjdump runs nvdisasm, which sits beside it.
    let out = Command::new(&tool)
        .env("NVDISASM_PATH", toolchain.root().join("bin"))
        .arg("-sass")
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let out = out?;
    if !out.status.success() {
        return Err(SassError::Failed(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Sass::parse(&String::from_utf8_lossy(&out.stdout), function)
}

impl Sass {
    /// The function's instructions in `cuobjdump -sass` output: lines
    /// `/*0090*/  LDG.E.128 R4, desc[UR4][R2.64] ;` after its
    /// `Function : NAME` header, up to the next header.
    pub fn parse(text: &str, function: &str) -> Result<Sass, SassError> {
        let mut inside = false;
        let mut found = false;
        let mut instructions = Vec::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(name) = trimmed.strip_prefix("Function : ") {
                inside = name.trim() == function;
                found |= inside;
                continue;
            }
            if !inside {
                continue;
            }
            let Some(rest) = trimmed.strip_prefix("/*") else { continue };
            let Some((offset, body)) = rest.split_once("*/") else { continue };
            let Ok(offset) = u64::from_str_radix(offset.trim(), 16) else { continue };
            let body = body.trim();
            // Encoding-only lines (`/* 0x... */`) carry no instruction.
            if body.is_empty() || body.starts_with("/*") {
                continue;
            }
            let text = body.split(" ;").next().unwrap_or(body).trim().to_string();
            instructions.push(Instruction { offset, text });
        }
        if !found {
            return Err(SassError::NoFunction(function.to_string()));
        }
        Ok(Sass { function: function.to_string(), instructions })
    }

    /// Instructions whose opcode starts with `prefix` (`"LDG.E.128"`,
    /// `"HMMA.16816"`, `"RED"`).
    pub fn with_opcode<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Instruction> + 'a {
        self.instructions.iter().filter(move |i| i.opcode().starts_with(prefix))
    }

    /// The atomics on memory (`RED`, sm_90's `REDG` and `REDAS`, `ATOM`,
    /// `ATOMG`, `ATOMS`, with any modifiers): not `REDUX`, the warp's
    /// reduction of a register, which a shuffle over part of a warp
    /// compiles to.
    pub fn memory_atomics(&self) -> impl Iterator<Item = &Instruction> + '_ {
        self.instructions.iter().filter(|i| {
            let mnemonic = i.opcode().split('.').next().unwrap_or("");
            matches!(mnemonic, "RED" | "REDG" | "REDAS" | "ATOM" | "ATOMG" | "ATOMS")
        })
    }

    /// The backward branches, `(target, branch)`: each closes a loop. (A
    /// branch to itself is the trap ptxas puts after the last `EXIT`, not
    /// a loop of the kernel's.)
    pub fn loops(&self) -> Vec<(u64, u64)> {
        self.instructions
            .iter()
            .filter_map(|i| i.branch_target().filter(|&t| t < i.offset).map(|t| (t, i.offset)))
            .collect()
    }

    /// Where control may go after instruction `at` (an index): the next
    /// one unless it is an unconditional branch or exit, and a branch's
    /// target. (`BRA.DIV` and predicated branches may fall through.)
    fn successors(&self, at: usize) -> Vec<usize> {
        let i = &self.instructions[at];
        let op = i.opcode();
        let mut out = Vec::new();
        let ends =
            (op == "EXIT" || op == "RET" || op.starts_with("BRA")) && !i.predicated() && op != "BRA.DIV";
        if !ends && at + 1 < self.instructions.len() {
            out.push(at + 1);
        }
        if let Some(target) = i.branch_target()
            && let Ok(t) = self.instructions.binary_search_by_key(&target, |x| x.offset)
        {
            out.push(t);
        }
        out
    }

    /// Whether an instruction lies on a cycle of the control flow: it can
    /// run again without the function starting over. (Cold code that
    /// compilers place between a loop's head and its back branch is not
    /// in the loop, so byte ranges would not do.)
    pub fn in_loop(&self, i: &Instruction) -> bool {
        let Ok(start) = self.instructions.binary_search_by_key(&i.offset, |x| x.offset) else { return false };
        let mut seen = vec![false; self.instructions.len()];
        let mut stack = self.successors(start);
        while let Some(at) = stack.pop() {
            if at == start {
                return true;
            }
            if !std::mem::replace(&mut seen[at], true) {
                stack.extend(self.successors(at));
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "
\tcode for sm_90
\t\tFunction : other
        /*0000*/                   EXIT ;
\t\tFunction : k
        /*0000*/                   MOV R1, c[0x0][0x28] ;                    /* 0x00000a0000017a02 */
                                                                              /* 0x000fc40000000f00 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/               @P0 BRA 0x10 ;
        /*0030*/                   RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R6.64], R5 ;
        /*0040*/                   EXIT ;
        /*0050*/                   BRA 0x50;
";

    #[test]
    fn a_listing_reads_as_instructions_and_loops() {
        let sass = Sass::parse(LISTING, "k").unwrap();
        let ops: Vec<&str> = sass.instructions.iter().map(|i| i.opcode()).collect();
        assert_eq!(ops, ["MOV", "LDG.E.128", "BRA", "RED.E.ADD.F32.FTZ.RN.STRONG.GPU", "EXIT", "BRA"]);
        assert_eq!(sass.with_opcode("LDG.E.128").count(), 1);
        // The branch to 0x10 closes a loop over the load; the self-branch
        // after EXIT is the usual trap, not a loop.
        assert_eq!(sass.loops(), [(0x10, 0x20)]);
        let load = sass.with_opcode("LDG").next().unwrap();
        let red = sass.with_opcode("RED").next().unwrap();
        assert!(sass.in_loop(load));
        assert!(!sass.in_loop(red));
        assert_eq!(sass.memory_atomics().count(), 1);
        assert!(matches!(Sass::parse(LISTING, "missing"), Err(SassError::NoFunction(_))));
        // A warp's reduction of a register is no atomic on memory.
        let warp = "\t\tFunction : k\n        /*0000*/                   REDUX.OR UR6, R30 ;\n        \
                    /*0010*/                   ATOMS.ADD RZ, [R2], R3 ;\n        \
                    /*0020*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R5 ;\n";
        let warp = Sass::parse(warp, "k").unwrap();
        let atomics: Vec<&str> = warp.memory_atomics().map(|i| i.opcode()).collect();
        assert_eq!(atomics, ["ATOMS.ADD", "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"]);
    }

    /// A divergent path placed after the exit branches back into the middle
    /// of the code: the atomic between its target and it runs once.
    const COLD_PATH: &str = "
		Function : k
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   BRA.DIV ~URZ, 0x50 ;
        /*0020*/                   SHFL.IDX R4, R5, RZ, 0x1f ;
        /*0030*/                   RED.E.ADD.F32.FTZ.RN.STRONG.GPU [R6.64], R4 ;
        /*0040*/                   EXIT ;
        /*0050*/                   WARPSYNC 0xffffffff ;
        /*0060*/                   BRA 0x20 ;
";

    #[test]
    fn code_between_a_back_branch_and_its_target_is_not_always_a_loop() {
        let sass = Sass::parse(COLD_PATH, "k").unwrap();
        assert_eq!(sass.loops(), [(0x20, 0x60)]);
        let red = sass.with_opcode("RED").next().unwrap();
        assert!(!sass.in_loop(red));
        let shfl = sass.with_opcode("SHFL").next().unwrap();
        assert!(!sass.in_loop(shfl));
    }
}
