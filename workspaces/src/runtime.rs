//! The runtime printed kernels call: [`HEADER`], a C header of `static
//! inline` functions, one accumulation array per [`Policy`] chosen by a
//! `#define`, the ISM options likewise. Its functions mirror [`crate::ism`]
//! (same policies, same growth, same merge), so a kernel and the library
//! give the same components for the same inserts.

use std::fmt;
use std::str::FromStr;

/// The C source of the runtime; [`prelude`] puts the definitions it needs
/// in front of it.
pub const HEADER: &str = include_str!("ism.h");

/// How a workspace's accumulation array holds its components (paper 001
/// §5, and the two extremes it measures against).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// A value and a flag per label of the whole range: never full.
    Dense,
    /// A bucket per first coordinate, deduplicated by a scan of the bucket.
    Bucket,
    /// Open addressing, `2^⌈log2 n⌉` slots, linear probing.
    Hash,
    /// Append, then one lexicographic sort per round.
    Coord,
    /// Kept sorted on every insert (the Map extreme): never full.
    Map,
    /// Append everything, one sort at the end (the Vector extreme).
    Vector,
}

impl Policy {
    pub const ALL: [Policy; 6] =
        [Policy::Dense, Policy::Bucket, Policy::Hash, Policy::Coord, Policy::Map, Policy::Vector];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Dense => "dense",
            Policy::Bucket => "bucket",
            Policy::Hash => "hash",
            Policy::Coord => "coord",
            Policy::Map => "map",
            Policy::Vector => "vector",
        }
    }

    /// The header's `#define` that picks this policy.
    fn define(self) -> &'static str {
        match self {
            Policy::Dense => "ISM_DENSE",
            Policy::Bucket => "ISM_BUCKET",
            Policy::Hash => "ISM_HASH",
            Policy::Coord => "ISM_COORD",
            Policy::Map => "ISM_MAP",
            Policy::Vector => "ISM_VECTOR",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("`{s}` is not a workspace policy ({})", names.join(", "))
        })
    }
}

/// The ISM template's optimizations, each of which can be switched off
/// (`ws.indexing`, `ws.realloc`, `ws.double_buffer`, `ws.pipeline`), and
/// the accumulation array's first capacity (`ws.cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IsmOptions {
    /// Coord sorts 4-byte ids instead of the components.
    pub indexing: bool,
    /// The accumulation array grows piecewise-linearly after each merge.
    pub reallocation: bool,
    /// Merges go to a second all array, swapped in, not copied back.
    pub double_buffering: bool,
    /// Sorts and merges run on a second thread while inserts go on.
    pub pipeline: bool,
    /// Components the accumulation array takes before its first merge.
    pub capacity: usize,
    /// With `pipeline`, only merges of at least this many components go to
    /// the second thread: a hand-off costs more than a short sort.
    pub pipeline_min: usize,
}

/// The largest `ws.cap` and `ws.pipeline_min`: 2^26 components, a first
/// accumulation array of about 2 GiB under the hash policy (twice as many
/// slots as components). Larger starts only risk the memory; the array
/// grows by itself (`ws.realloc`).
pub const MAX_COUNT: usize = 1 << 26;

impl Default for IsmOptions {
    fn default() -> Self {
        IsmOptions {
            indexing: true,
            reallocation: true,
            double_buffering: true,
            pipeline: false,
            capacity: 256,
            pipeline_min: 1 << 15,
        }
    }
}

impl IsmOptions {
    /// The options by their schedule names, with their values.
    pub fn items(&self) -> [(&'static str, bool); 4] {
        [
            ("indexing", self.indexing),
            ("realloc", self.reallocation),
            ("double_buffer", self.double_buffering),
            ("pipeline", self.pipeline),
        ]
    }

    /// Sets the item `name` (a switch of [`IsmOptions::items`] to `on` or
    /// `off`, or `cap` or `pipeline_min` to a positive integer) from its
    /// schedule text.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let count = |what: &str| {
            value
                .parse()
                .ok()
                .filter(|c| (1..=MAX_COUNT).contains(c))
                .ok_or(format!("ws.{what} is an integer from 1 to {MAX_COUNT} (2^26), not `{value}`"))
        };
        match name {
            "cap" => return count(name).map(|c| self.capacity = c),
            "pipeline_min" => return count(name).map(|c| self.pipeline_min = c),
            _ => {}
        }
        let on = match value {
            "on" => true,
            "off" => false,
            _ => return Err(format!("ws.{name} is on or off")),
        };
        let slot = match name {
            "indexing" => &mut self.indexing,
            "realloc" => &mut self.reallocation,
            "double_buffer" => &mut self.double_buffering,
            "pipeline" => &mut self.pipeline,
            _ => {
                return Err(format!(
                    "`ws.{name}` is not a workspace item (ws.indexing, ws.realloc, ws.double_buffer, ws.pipeline, \
                     ws.cap, ws.pipeline_min)"
                ));
            }
        };
        *slot = on;
        Ok(())
    }
}

/// The runtime for `policy` under `options`, values of C type `real`.
pub fn prelude(policy: Policy, options: IsmOptions, real: &str) -> String {
    let mut out = format!("#define REAL {real}\n");
    for p in Policy::ALL {
        out += &format!("#define {} {}\n", p.define(), u8::from(p == policy));
    }
    let on = |b: bool| u8::from(b);
    out += &format!(
        "#define ISM_INDEXING {}\n#define ISM_REALLOC {}\n#define ISM_DOUBLE_BUFFER {}\n#define ISM_PIPELINE {}\n",
        on(options.indexing),
        on(options.reallocation),
        on(options.double_buffering),
        on(options.pipeline)
    );
    out += &format!("#define ISM_PIPELINE_MIN ((int64_t){})\n", options.pipeline_min);
    out += HEADER;
    out += "#undef REAL\n";
    out
}
