//! A key as it verifies tokens: its material and the checks a token signed with it must
//! pass — what the static keys and the identity provider's key set share.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};

#[derive(Clone)]
pub(super) struct VerifyingKey {
    pub(super) key: DecodingKey,
    pub(super) validation: Validation,
}

/// How tokens signed with `alg` are checked: signature, `exp` (30 s leeway), `sub`, and the
/// configured issuer and audience.
pub(super) fn validation(alg: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> Validation {
    let mut validation = Validation::new(alg);
    validation.leeway = 30;
    validation.set_required_spec_claims(&["exp", "sub"]);
    if let Some(iss) = issuer {
        validation.set_issuer(&[iss]);
    }
    match audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            // Without this a token that carries no `aud` at all would pass.
            validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        }
        None => validation.validate_aud = false,
    }
    validation
}
