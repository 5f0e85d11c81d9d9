//! What a record that cannot be processed becomes on `<topic>.dlq` (docs/spec.md §11): its
//! key, value and headers, and why, in `x-dlq-*` headers — in a form that always fits.
//!
//! A default broker takes records up to about 1 MiB, so a record just under that limit is
//! accepted on the inbound topic (and is malformed: over `MAX_MESSAGE`), but its copy plus
//! our headers no longer fits the producer's `message.max.bytes`. A dead letter that cannot
//! be written stops the consumer for good (its records are handled in order), so the copy
//! is cut to a bounded size first: the value's first `MAX_MESSAGE` bytes, the original
//! headers while they are small, the key while it is short, and in every case the reason
//! and the original coordinates (topic, partition, offset) from which an operator reads the
//! whole record while the topic's retention keeps it.

use crate::adapters::messaging::meeting::MAX_MESSAGE;

/// The most a dead letter carries: half of librdkafka's default `message.max.bytes`
/// (1 000 000), far under a default broker's limit.
pub const MAX_DEAD_LETTER: usize = 512 * 1024;
/// Original headers are kept while they add up to this much.
const MAX_KEPT_HEADERS: usize = 16 * 1024;
/// A key is kept while it is this short (it places the dead letter: the same key, the same
/// partition of the dead-letter topic).
const MAX_KEPT_KEY: usize = 4 * 1024;
/// The reason is cut to this many characters.
const MAX_REASON: usize = 1_000;

/// The record that could not be processed, as read.
pub struct Original<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// How much of the original a dead letter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// All of it that fits in [`MAX_DEAD_LETTER`].
    WhatFits,
    /// Only the reason and the coordinates: for a cluster that refused even a bounded copy
    /// as too large (a topic with a small `max.message.bytes`).
    Coordinates,
}

/// A record for `<topic>.dlq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl DeadLetter {
    /// The record's size as a producer counts it, near enough: key, value and headers.
    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum::<usize>()
    }
}

/// The dead letter of `original`, dead-lettered as `outcome` because of `why`.
pub fn dead_letter(original: &Original<'_>, outcome: &str, why: &str, keep: Keep) -> DeadLetter {
    let reason: String = why.chars().take(MAX_REASON).collect();
    let mut cut: Vec<&str> = Vec::new();
    let whole = keep == Keep::WhatFits;

    let key = original.key.filter(|k| whole && k.len() <= MAX_KEPT_KEY).map(<[u8]>::to_vec);
    if original.key.is_some() && key.is_none() {
        cut.push("key");
    }
    // Our own headers are never copied from a record that was dead-lettered before.
    let theirs: Vec<_> = original.headers.iter().filter(|(k, _)| !k.starts_with("x-dlq-")).collect();
    let their_size: usize = theirs.iter().map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len)).sum();
    let mut headers: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    if whole && their_size <= MAX_KEPT_HEADERS {
        headers.extend(theirs.iter().map(|(k, v)| ((*k).to_owned(), v.map(<[u8]>::to_vec))));
    } else if !theirs.is_empty() {
        cut.push("headers");
    }
    let ours = [
        ("x-dlq-reason", reason),
        ("x-dlq-outcome", outcome.to_owned()),
        ("x-dlq-topic", original.topic.to_owned()),
        ("x-dlq-partition", original.partition.to_string()),
        ("x-dlq-offset", original.offset.to_string()),
    ];
    headers.extend(ours.into_iter().map(|(k, v)| (k.to_owned(), Some(v.into_bytes()))));

    let value = original.value.map(|v| {
        let room = MAX_DEAD_LETTER.saturating_sub(key.as_ref().map_or(0, Vec::len) + their_size + 2 * 1024);
        if whole && v.len() <= room {
            v.to_vec()
        } else {
            v[..v.len().min(if whole { MAX_MESSAGE } else { 0 })].to_vec()
        }
    });
    if let (Some(kept), Some(v)) = (&value, original.value)
        && kept.len() < v.len()
    {
        cut.push("value");
        headers.push(("x-dlq-original-size".to_owned(), Some(v.len().to_string().into_bytes())));
    }
    if !cut.is_empty() {
        headers.push(("x-dlq-truncated".to_owned(), Some(cut.join(",").into_bytes())));
    }
    DeadLetter { key, value, headers }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original<'a>(
        key: &'a [u8],
        value: &'a [u8],
        headers: Vec<(&'a str, Option<&'a [u8]>)>,
    ) -> Original<'a> {
        Original {
            topic: "meeting.events",
            partition: 3,
            offset: 41,
            key: Some(key),
            value: Some(value),
            headers,
        }
    }

    fn header<'a>(letter: &'a DeadLetter, key: &str) -> Option<&'a str> {
        letter
            .headers
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
            .map(|v| std::str::from_utf8(v).unwrap())
    }

    #[test]
    fn a_small_record_is_kept_whole_with_the_reason_and_its_coordinates() {
        let letter = dead_letter(
            &original(b"m-1", b"not json", vec![("event_type", Some(b"x")), ("x-dlq-reason", Some(b"old"))]),
            "malformed",
            "body: not JSON",
            Keep::WhatFits,
        );
        assert_eq!(letter.key.as_deref(), Some(&b"m-1"[..]));
        assert_eq!(letter.value.as_deref(), Some(&b"not json"[..]));
        assert_eq!(header(&letter, "event_type"), Some("x"));
        assert_eq!(header(&letter, "x-dlq-reason"), Some("body: not JSON"), "ours, not the copied one");
        assert_eq!(letter.headers.iter().filter(|(k, _)| k == "x-dlq-reason").count(), 1);
        assert_eq!(
            (header(&letter, "x-dlq-topic"), header(&letter, "x-dlq-partition")),
            (Some("meeting.events"), Some("3"))
        );
        assert_eq!(header(&letter, "x-dlq-offset"), Some("41"));
        assert_eq!(header(&letter, "x-dlq-truncated"), None);
    }

    #[test]
    fn a_record_just_under_a_brokers_limit_is_cut_to_what_fits() {
        let value = vec![b'x'; 999_900];
        let letter =
            dead_letter(&original(b"m-big", &value, vec![]), "malformed", "too large", Keep::WhatFits);
        assert!(letter.size() <= MAX_DEAD_LETTER, "{}", letter.size());
        assert_eq!(letter.value.as_ref().map(Vec::len), Some(MAX_MESSAGE), "the value's start");
        assert_eq!(header(&letter, "x-dlq-original-size"), Some("999900"));
        assert_eq!(header(&letter, "x-dlq-truncated"), Some("value"));
        assert_eq!(letter.key.as_deref(), Some(&b"m-big"[..]), "the key still places it");
    }

    #[test]
    fn huge_headers_and_key_are_dropped_and_said_so() {
        let big = vec![b'h'; 600_000];
        let key = vec![b'k'; 10_000];
        let letter =
            dead_letter(&original(&key, b"{}", vec![("blob", Some(&big))]), "malformed", "x", Keep::WhatFits);
        assert!(letter.size() <= MAX_DEAD_LETTER);
        assert_eq!(letter.key, None);
        assert_eq!(header(&letter, "blob"), None);
        assert_eq!(header(&letter, "x-dlq-truncated"), Some("key,headers"));
        assert_eq!(letter.value.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn a_long_reason_is_cut_and_coordinates_alone_keep_nothing_else() {
        let why = "é".repeat(5_000);
        let letter =
            dead_letter(&original(b"k", b"body", vec![("a", None)]), "malformed", &why, Keep::Coordinates);
        assert_eq!(header(&letter, "x-dlq-reason").map(|r| r.chars().count()), Some(MAX_REASON));
        assert_eq!((letter.key.as_ref(), letter.value.as_ref().map(Vec::len)), (None, Some(0)));
        assert_eq!(header(&letter, "x-dlq-truncated"), Some("key,headers,value"));
        assert_eq!(header(&letter, "x-dlq-offset"), Some("41"));
    }
}
