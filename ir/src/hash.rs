//! A stable 128-bit hash for cache keys (compiled C libraries, CUDA
//! modules, autotuning results): FNV-1a with 128-bit state. Unlike std's
//! `DefaultHasher` it gives the same value in every build and process. Not
//! cryptographic; cache hits also compare what they stored.

/// FNV-1a, 128-bit.
#[derive(Clone, Debug)]
pub struct StableHash(u128);

impl Default for StableHash {
    fn default() -> Self {
        StableHash::new()
    }
}

impl StableHash {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    pub fn new() -> Self {
        StableHash(Self::OFFSET)
    }

    /// Hashes raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u128::from(b)).wrapping_mul(Self::PRIME);
        }
    }

    /// Hashes a length-prefixed field, so field boundaries are unambiguous.
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes(&(bytes.len() as u64).to_le_bytes());
        self.bytes(bytes);
        self
    }

    pub fn finish(&self) -> u128 {
        self.0
    }

    /// The hash as 32 hex digits, for file names.
    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

/// The hex hash of a list of fields.
pub fn hash_fields<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = StableHash::new();
    for f in fields {
        h.field(f);
    }
    h.hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv128_known_values() {
        // Reference values of FNV-1a 128.
        let hash = |s: &str| {
            let mut h = StableHash::new();
            h.bytes(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(hash("a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn fields_are_delimited() {
        assert_ne!(hash_fields([b"ab".as_slice(), b"c"]), hash_fields([b"a".as_slice(), b"bc"]));
        assert_eq!(hash_fields([b"ab".as_slice()]).len(), 32);
    }
}
