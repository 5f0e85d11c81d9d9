//! Merchant API keys (docs/spec.md §15): `mk_<prefix>_<secret>`, sent as a bearer token and
//! never parsed as a JWT. The prefix (6 random bytes, hex) finds the key's row; the secret
//! (32 random bytes, hex) is shown once, when the key is made, and kept only as its SHA-256
//! (a secret of 256 random bits needs no salt nor slow hash: there is nothing to guess);
//! a presented key is checked against that hash in constant time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What every merchant key starts with.
pub const KEY_MARK: &str = "mk_";
/// Random bytes of a key's prefix (12 hex digits).
const PREFIX_BYTES: usize = 6;
/// Random bytes of a key's secret (64 hex digits): at least 32, as §15 asks.
const SECRET_BYTES: usize = 32;

/// A key just made: the plain key (to show once, never stored, never logged), and what is
/// stored of it.
pub struct IssuedKey {
    /// `mk_<prefix>_<secret>`.
    pub plain: String,
    pub prefix: String,
    /// SHA-256 of the secret.
    pub hash: [u8; 32],
}

impl std::fmt::Debug for IssuedKey {
    /// The plain key never appears in a log line: only its prefix.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a key's secret: what is stored of it.
pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new key, from the operating system's randomness.
///
/// # Errors
/// The operating system gives no randomness (nothing is made).
pub fn issue() -> Result<IssuedKey, getrandom::Error> {
    let mut prefix = [0u8; PREFIX_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    getrandom::fill(&mut prefix)?;
    getrandom::fill(&mut secret)?;
    let (prefix, secret) = (hex(&prefix), hex(&secret));
    Ok(IssuedKey { plain: format!("{KEY_MARK}{prefix}_{secret}"), hash: hash(&secret), prefix })
}

/// A key as presented: its prefix (to find its row) and its secret (to check).
#[derive(PartialEq, Eq)]
pub struct PresentedKey<'a> {
    pub prefix: &'a str,
    secret: &'a str,
}

impl std::fmt::Debug for PresentedKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PresentedKey").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// A bearer token read as a merchant key: `mk_`, 12 lowercase hex digits, `_`, 64 lowercase
/// hex digits; `None` for anything else (then it is no merchant key at all).
pub fn presented(token: &str) -> Option<PresentedKey<'_>> {
    let rest = token.strip_prefix(KEY_MARK)?;
    let (prefix, secret) = rest.split_once('_')?;
    let lower_hex =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (lower_hex(prefix, PREFIX_BYTES * 2) && lower_hex(secret, SECRET_BYTES * 2))
        .then_some(PresentedKey { prefix, secret })
}

impl PresentedKey<'_> {
    /// Whether this is the key whose secret hashes to `stored`, compared in constant time.
    pub fn matches(&self, stored: &[u8; 32]) -> bool {
        hash(self.secret).ct_eq(stored).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_shown_once_and_kept_only_as_its_hash() {
        let key = issue().unwrap();
        let presented = presented(&key.plain).expect("a key made here reads back");
        assert_eq!(presented.prefix, key.prefix);
        assert!(presented.matches(&key.hash));
        assert!(!format!("{key:?} {presented:?}").contains(&key.plain[16..]), "no secret in a log line");
        assert_ne!(issue().unwrap().plain, key.plain, "each key its own randomness");
    }

    #[test]
    fn a_key_one_byte_off_or_of_another_shape_is_refused() {
        let key = issue().unwrap();
        // The last hex digit changed: the right prefix, a wrong secret.
        let mut off = key.plain.clone();
        let last = off.pop().unwrap();
        off.push(if last == '0' { '1' } else { '0' });
        assert!(!presented(&off).unwrap().matches(&key.hash));
        let other = issue().unwrap();
        assert!(!presented(&other.plain).unwrap().matches(&key.hash), "another key of the right shape");
        for bad in [
            "",
            "mk_",
            &key.plain.to_uppercase(),
            &key.plain[..key.plain.len() - 1],
            &format!("{}0", key.plain),
            &key.plain.replacen("mk_", "sk_", 1),
            "eyJhbGciOiJIUzI1NiJ9.e30.x",
        ] {
            assert!(presented(bad).is_none(), "{bad:?}");
        }
    }
}
