//! What the platforms' Jackson writes, for the dialects (docs/dialects.md).

use chrono::NaiveDateTime;

/// A `LocalDateTime` as Jackson's `JavaTimeModule` writes it (ISO-8601 without an offset,
/// seconds always, the fraction only as long as it needs to be): `2026-05-01T10:00:00`,
/// `2026-05-01T10:00:00.25`.
pub fn local_date_time(at: NaiveDateTime) -> String {
    let mut text = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = at.and_utc().timestamp_subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text
}
