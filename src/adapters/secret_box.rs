//! The [`SecretBox`] of `secrets.key`: XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`),
//! a fresh 24-byte nonce from the operating system for every value, the key's id bound in
//! as associated data. `secrets.previous_key` still opens what it sealed until a rotation
//! seals it again.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::adapters::Secret;
use crate::application::ports::{SealError, Sealed, SecretBox};

const NONCE: usize = 24;

/// A key and its id.
struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

impl Key {
    /// `secret`: 32 bytes in base64 (checked by the configuration).
    fn of(secret: &Secret) -> Option<Key> {
        let bytes = STANDARD.decode(secret.expose()).ok()?;
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes).ok()?;
        let digest =
            Sha256::new().chain_update(b"orchestrator secrets.key\n").chain_update(&bytes).finalize();
        let id = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        Some(Key { id, cipher })
    }
}

/// XChaCha20-Poly1305 under `secrets.key` (and `secrets.previous_key`).
pub struct XChaChaBox {
    current: Option<Key>,
    previous: Option<Key>,
}

impl XChaChaBox {
    pub fn new(key: Option<&Secret>, previous: Option<&Secret>) -> Self {
        XChaChaBox { current: key.and_then(Key::of), previous: previous.and_then(Key::of) }
    }
}

impl SecretBox for XChaChaBox {
    fn seal(&self, plain: &[u8]) -> Result<Sealed, SealError> {
        let key = self.current.as_ref().ok_or(SealError::NoKey)?;
        let mut nonce = [0u8; NONCE];
        getrandom::fill(&mut nonce).map_err(|_| SealError::Broken)?;
        let sealed = key
            .cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: plain, aad: key.id.as_bytes() })
            .map_err(|_| SealError::Broken)?;
        let mut data = nonce.to_vec();
        data.extend_from_slice(&sealed);
        Ok(Sealed { key_id: key.id.clone(), data: STANDARD.encode(data) })
    }

    fn open(&self, sealed: &Sealed) -> Result<Vec<u8>, SealError> {
        let key = [&self.current, &self.previous]
            .into_iter()
            .flatten()
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| SealError::UnknownKey(sealed.key_id.clone()))?;
        let data = STANDARD.decode(&sealed.data).map_err(|_| SealError::Broken)?;
        if data.len() < NONCE {
            return Err(SealError::Broken);
        }
        let (nonce, text) = data.split_at(NONCE);
        let nonce: [u8; NONCE] = nonce.try_into().map_err(|_| SealError::Broken)?;
        key.cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: text, aad: key.id.as_bytes() })
            .map_err(|_| SealError::Broken)
    }

    fn current_key(&self) -> Option<String> {
        self.current.as_ref().map(|k| k.id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Secret {
        Secret::new(STANDARD.encode([byte; 32]))
    }

    #[test]
    fn a_sealed_value_opens_only_whole_and_under_its_key() {
        let current = XChaChaBox::new(Some(&key(1)), None);
        let sealed = current.seal(b"https://hooks.example/x?token=t").unwrap();
        assert_eq!(current.open(&sealed).unwrap(), b"https://hooks.example/x?token=t");
        assert!(!sealed.data.contains("hooks"), "no plain text in the sealed value");
        assert_ne!(current.seal(b"same").unwrap().data, current.seal(b"same").unwrap().data, "fresh nonces");
        // One bit flipped anywhere: refused.
        let mut bytes = STANDARD.decode(&sealed.data).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = Sealed { data: STANDARD.encode(bytes), ..sealed.clone() };
        assert_eq!(current.open(&altered), Err(SealError::Broken));
        // Another key does not open it; named as the previous key it does.
        let other = XChaChaBox::new(Some(&key(2)), None);
        assert_eq!(other.open(&sealed), Err(SealError::UnknownKey(sealed.key_id.clone())));
        let rotated = XChaChaBox::new(Some(&key(2)), Some(&key(1)));
        assert_eq!(rotated.open(&sealed).unwrap(), b"https://hooks.example/x?token=t");
        assert_ne!(rotated.seal(b"x").unwrap().key_id, sealed.key_id, "new values under the new key");
        // A forged key id over the same data: its key does not authenticate it.
        let forged = Sealed { key_id: rotated.current_key().unwrap(), ..sealed };
        assert_eq!(rotated.open(&forged), Err(SealError::Broken));
        assert_eq!(XChaChaBox::new(None, None).seal(b"x"), Err(SealError::NoKey));
    }
}
