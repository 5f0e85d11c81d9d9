//! JWT bearer authentication (docs/spec.md §5). Keys are chosen by `kid` so they can rotate:
//! static keys from `auth.keys` (the first that can sign mints `app token`, all verify), and
//! an identity provider's published key set (`auth.jwks_url`) — fetched at start, cached,
//! fetched again when a token names a `kid` the cache lacks (at most once per
//! `auth.jwks_refresh_interval`) and in the background once the cached set is older than
//! [`JWKS_MAX_AGE`]. Roles are read from `auth.roles_claim` (a claim or a dotted path).

mod extract;
mod jwks;
mod keys;
mod settings;
mod verifying;

pub use extract::{
    Admin, Caller, InMerchant, MerchantsCaller, Needs, Places, PlatformOperator, Reads, Then, Writes,
};
pub use jwks::{JWKS_MAX_AGE, JwksError};
pub use keys::{CLOCK_LEEWAY_SECS, HMAC_SHORTEST, JwtKeys, KeyError, hmac_algorithms, not_valid_yet};
pub use settings::{ADMIN_ROLE, AuthSettings, DEV_KID, KeyAlgorithm, KeySettings, RawKey};
