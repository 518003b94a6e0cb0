//! Format specifications as users write them: `csr`, `groupcoo:dim=0,g=auto`,
//! `blockgroupcoo:bm=32,bk=32,dim=0,g=4`, `bcsr:bm=4,bk=4`, `csf:modes=2-0-1`,
//! and level lists such as `dddc` or `dc:modes=1-0`.

use std::fmt;
use std::str::FromStr;

use crate::FormatError;

/// A group size: fixed, or chosen from the data (the neighbouring power of
/// two of g* = √(S/n) with the smaller F(g)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupSize {
    Fixed(usize),
    Auto,
}

impl fmt::Display for GroupSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupSize::Fixed(g) => write!(f, "{g}"),
            GroupSize::Auto => f.write_str("auto"),
        }
    }
}

/// Which concrete format to store a tensor in, with its parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FormatSpec {
    Dense,
    Coo,
    Csr,
    Csc,
    Dcsr,
    Dcsc,
    /// CSF; `modes` is the level order (identity when empty).
    Csf {
        modes: Vec<usize>,
    },
    Ell,
    Bcsr {
        bm: usize,
        bk: usize,
    },
    GroupCoo {
        dim: usize,
        g: GroupSize,
    },
    BlockGroupCoo {
        bm: usize,
        bk: usize,
        dim: usize,
        g: GroupSize,
    },
    /// A level list (`dddc`, `dccc`, `dc`, …): level `l` is dense when
    /// `dense[l]`, compressed otherwise, and stores dimension `modes[l]`
    /// (identity when `modes` is empty). See [`LevelTensor`](crate::LevelTensor).
    Levels {
        dense: Vec<bool>,
        modes: Vec<usize>,
    },
}

/// Every format name the parser knows, with its parameters, for error
/// messages and the CLI's help.
pub const FORMAT_SYNTAX: &str = "dense, coo, csr, csc, dcsr, dcsc, csf[:modes=0-1-2], ell, \
bcsr:bm=B,bk=B, groupcoo[:dim=D,g=G|auto], blockgroupcoo:bm=B,bk=B[,dim=D,g=G|auto], \
d/c level lists (one letter per dimension: dddc, dccc, dcc[:modes=2-0-1])";

impl FormatSpec {
    /// The short name (`groupcoo`), as in the syntax. A level list's name
    /// is its letters, which are not static: it answers `levels`, and its
    /// `Display` writes the letters (`dddc`).
    pub fn name(&self) -> &'static str {
        match self {
            FormatSpec::Dense => "dense",
            FormatSpec::Coo => "coo",
            FormatSpec::Csr => "csr",
            FormatSpec::Csc => "csc",
            FormatSpec::Dcsr => "dcsr",
            FormatSpec::Dcsc => "dcsc",
            FormatSpec::Csf { .. } => "csf",
            FormatSpec::Ell => "ell",
            FormatSpec::Bcsr { .. } => "bcsr",
            FormatSpec::GroupCoo { .. } => "groupcoo",
            FormatSpec::BlockGroupCoo { .. } => "blockgroupcoo",
            FormatSpec::Levels { .. } => "levels",
        }
    }

    /// True for formats that only hold matrices.
    pub fn matrix_only(&self) -> bool {
        !matches!(
            self,
            FormatSpec::Dense
                | FormatSpec::Coo
                | FormatSpec::Csf { .. }
                | FormatSpec::GroupCoo { .. }
                | FormatSpec::Levels { .. }
        )
    }
}

impl fmt::Display for FormatSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatSpec::Levels { dense, .. } => f.write_str(&crate::levels::letters(dense))?,
            _ => f.write_str(self.name())?,
        }
        match self {
            FormatSpec::Csf { modes } | FormatSpec::Levels { modes, .. } if !modes.is_empty() => {
                let modes: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
                write!(f, ":modes={}", modes.join("-"))
            }
            FormatSpec::Bcsr { bm, bk } => write!(f, ":bm={bm},bk={bk}"),
            FormatSpec::GroupCoo { dim, g } => write!(f, ":dim={dim},g={g}"),
            FormatSpec::BlockGroupCoo { bm, bk, dim, g } => write!(f, ":bm={bm},bk={bk},dim={dim},g={g}"),
            _ => Ok(()),
        }
    }
}

/// The `key=value` pairs after the colon, consumed one by one so unknown
/// keys can be reported.
struct Params<'a> {
    spec: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    fn parse(spec: &'a str, text: &'a str) -> Result<Self, FormatError> {
        let mut pairs = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(bad(spec, format!("expected key=value, found `{item}`")));
            };
            let key = key.trim();
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(bad(spec, format!("{key} is given twice")));
            }
            pairs.push((key, value.trim()));
        }
        Ok(Params { spec, pairs })
    }

    fn take(&mut self, key: &str) -> Option<&'a str> {
        let at = self.pairs.iter().position(|(k, _)| *k == key)?;
        Some(self.pairs.remove(at).1)
    }

    fn positive(&mut self, key: &str, default: Option<usize>) -> Result<usize, FormatError> {
        match self.take(key) {
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(self.spec, format!("{key} must be a positive integer, found `{v}`"))),
            },
            None => default.ok_or_else(|| bad(self.spec, format!("missing {key}=..."))),
        }
    }

    fn dim(&mut self) -> Result<usize, FormatError> {
        match self.take("dim") {
            Some(v) => v.parse().map_err(|_| bad(self.spec, format!("dim must be an integer, found `{v}`"))),
            None => Ok(0),
        }
    }

    fn group(&mut self) -> Result<GroupSize, FormatError> {
        match self.take("g") {
            None | Some("auto") => Ok(GroupSize::Auto),
            Some(v) => match v.parse::<usize>() {
                Ok(g) if g > 0 => Ok(GroupSize::Fixed(g)),
                _ => Err(bad(self.spec, format!("g must be a positive integer or `auto`, found `{v}`"))),
            },
        }
    }

    /// `modes=2-0-1`, empty when absent.
    fn modes(&mut self) -> Result<Vec<usize>, FormatError> {
        match self.take("modes") {
            None => Ok(Vec::new()),
            Some(v) => v
                .split('-')
                .map(|m| m.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad(self.spec, format!("modes must look like 2-0-1, found `{v}`"))),
        }
    }

    fn finish(self, expected: &str) -> Result<(), FormatError> {
        match self.pairs.first() {
            None => Ok(()),
            Some((key, _)) => Err(bad(self.spec, format!("unknown parameter `{key}` (expected {expected})"))),
        }
    }
}

fn bad(spec: &str, reason: String) -> FormatError {
    FormatError::invalid(format!("format `{spec}`"), reason)
}

impl FromStr for FormatSpec {
    type Err = FormatError;

    fn from_str(spec: &str) -> Result<Self, FormatError> {
        let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
        let mut p = Params::parse(spec, params)?;
        let (format, expected) = match name.trim().to_ascii_lowercase().as_str() {
            "dense" => (FormatSpec::Dense, "none"),
            "coo" => (FormatSpec::Coo, "none"),
            "csr" => (FormatSpec::Csr, "none"),
            "csc" => (FormatSpec::Csc, "none"),
            "dcsr" => (FormatSpec::Dcsr, "none"),
            "dcsc" => (FormatSpec::Dcsc, "none"),
            "ell" => (FormatSpec::Ell, "none"),
            "csf" => (FormatSpec::Csf { modes: p.modes()? }, "modes"),
            "bcsr" => {
                let bm = p.positive("bm", None)?;
                let bk = p.positive("bk", None)?;
                (FormatSpec::Bcsr { bm, bk }, "bm, bk")
            }
            "groupcoo" => {
                let dim = p.dim()?;
                let g = p.group()?;
                (FormatSpec::GroupCoo { dim, g }, "dim, g")
            }
            "blockgroupcoo" => {
                let bm = p.positive("bm", None)?;
                let bk = p.positive("bk", None)?;
                let dim = p.dim()?;
                let g = p.group()?;
                (FormatSpec::BlockGroupCoo { bm, bk, dim, g }, "bm, bk, dim, g")
            }
            // No other format's name is made of `d` and `c` alone.
            letters if !letters.is_empty() && letters.bytes().all(|b| b == b'd' || b == b'c') => {
                let dense: Vec<bool> = letters.bytes().map(|b| b == b'd').collect();
                let modes = p.modes()?;
                if !modes.is_empty() && crate::coo::check_permutation(&modes, dense.len()).is_err() {
                    let found: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
                    return Err(bad(
                        spec,
                        format!(
                            "modes must be a permutation of 0..{} (one per level), found `{}`",
                            dense.len(),
                            found.join("-")
                        ),
                    ));
                }
                (FormatSpec::Levels { dense, modes }, "modes")
            }
            other => {
                return Err(bad(spec, format!("unknown format `{other}`; known formats: {FORMAT_SYNTAX}")));
            }
        };
        p.finish(expected)?;
        Ok(format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_through_display() {
        for text in [
            "dense",
            "coo",
            "csr",
            "csc",
            "dcsr",
            "dcsc",
            "csf",
            "csf:modes=2-0-1",
            "ell",
            "bcsr:bm=4,bk=2",
            "groupcoo:dim=1,g=8",
            "groupcoo:dim=0,g=auto",
            "blockgroupcoo:bm=32,bk=32,dim=0,g=4",
            "d",
            "c",
            "dc",
            "cc",
            "dc:modes=1-0",
            "dddc",
            "dccc",
            "dcc:modes=2-0-1",
        ] {
            let spec: FormatSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            "groupcoo".parse::<FormatSpec>().unwrap(),
            FormatSpec::GroupCoo { dim: 0, g: GroupSize::Auto }
        );
    }

    #[test]
    fn level_lists_parse_from_their_letters() {
        assert_eq!(
            "DddC".parse::<FormatSpec>().unwrap(),
            FormatSpec::Levels { dense: vec![true, true, true, false], modes: vec![] }
        );
        assert_eq!(
            "cd:modes=1-0".parse::<FormatSpec>().unwrap(),
            FormatSpec::Levels { dense: vec![false, true], modes: vec![1, 0] }
        );
        assert_eq!("dc".parse::<FormatSpec>().unwrap().name(), "levels");
        // The named formats keep their meaning.
        for name in ["dense", "coo", "csr", "csc", "dcsr", "dcsc", "csf", "ell"] {
            assert_eq!(name.parse::<FormatSpec>().unwrap().name(), name);
        }
        let msg = |s: &str| s.parse::<FormatSpec>().unwrap_err().to_string();
        assert_eq!(
            msg("dcc:modes=0-1"),
            "invalid format `dcc:modes=0-1`: modes must be a permutation of 0..3 (one per level), found `0-1`"
        );
        assert_eq!(
            msg("dc:modes=1-1"),
            "invalid format `dc:modes=1-1`: modes must be a permutation of 0..2 (one per level), found `1-1`"
        );
        assert_eq!(
            msg("dc:modes=a-b"),
            "invalid format `dc:modes=a-b`: modes must look like 2-0-1, found `a-b`"
        );
        assert_eq!(msg("dc:g=2"), "invalid format `dc:g=2`: unknown parameter `g` (expected modes)");
        assert!(msg("dcx").contains("unknown format `dcx`"));
        assert!(msg(":modes=0").contains("unknown format ``"));
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let msg = |s: &str| s.parse::<FormatSpec>().unwrap_err().to_string();
        assert!(msg("csx").contains("unknown format `csx`; known formats: dense"));
        assert_eq!(
            msg("groupcoo:g=0"),
            "invalid format `groupcoo:g=0`: g must be a positive integer or `auto`, found `0`"
        );
        assert_eq!(msg("bcsr:bm=4"), "invalid format `bcsr:bm=4`: missing bk=...");
        assert_eq!(msg("csr:g=2"), "invalid format `csr:g=2`: unknown parameter `g` (expected none)");
        assert_eq!(msg("groupcoo:dim"), "invalid format `groupcoo:dim`: expected key=value, found `dim`");
        assert_eq!(msg("groupcoo:g=2,g=4"), "invalid format `groupcoo:g=2,g=4`: g is given twice");
    }
}
