//! Typed identifiers, so an order id can never be passed where a payment id is expected.
//!
//! Ids are UUID v7: time-ordered, which keeps B-tree inserts local and lets "newest first"
//! listings page on the id alone.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

macro_rules! typed_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }
    };
}

typed_id!(
    /// Identifies an [`crate::domain::order::Order`].
    OrderId
);
typed_id!(
    /// Identifies a [`crate::domain::payment::Payment`].
    PaymentId
);
typed_id!(
    /// Identifies a [`crate::domain::payment::Refund`]: one refund of (part of) a payment.
    RefundId
);
typed_id!(
    /// Identifies a [`crate::domain::settlement::Settlement`].
    SettlementId
);
typed_id!(
    /// Identifies a [`crate::domain::notification::Notification`].
    NotificationId
);
typed_id!(
    /// Identifies one outbox event; it is also the AMQP `message_id`.
    EventId
);
typed_id!(
    /// Identifies a merchant (docs/spec.md §15).
    MerchantId
);
typed_id!(
    /// Identifies a store of a merchant.
    StoreId
);
typed_id!(
    /// Identifies a merchant's API key (not the key: its row).
    ApiKeyId
);
typed_id!(
    /// Identifies a merchant's webhook endpoint (docs/spec.md §16).
    WebhookEndpointId
);
