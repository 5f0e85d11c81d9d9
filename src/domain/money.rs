//! Money: integer minor units plus an ISO-4217 currency, with checked arithmetic.
//!
//! Floating point never touches an amount. Every operation that could overflow returns
//! [`MoneyError::Overflow`] instead of wrapping, and amounts of different currencies never mix.

use std::fmt;
use std::str::FromStr;

/// Why an amount or currency was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("amount overflows a 64-bit integer of minor units")]
    Overflow,
    #[error("amount must not be negative")]
    Negative,
    #[error("unknown ISO-4217 currency code `{0}`")]
    UnknownCurrency(String),
    #[error("currency mismatch: {left} and {right}")]
    CurrencyMismatch { left: Currency, right: Currency },
}

/// The active ISO-4217 codes this service accepts (upper case, three letters).
const ISO_4217: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD",
    "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CLP", "CNY",
    "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP",
    "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR",
    "IQD", "IRR", "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT",
    "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR",
    "MVR", "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK",
    "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD",
    "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY",
    "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VES", "VND", "VUV", "WST", "XAF", "XCD", "XOF",
    "XPF", "YER", "ZAR", "ZMW", "ZWL",
];

/// An ISO-4217 currency code, known to be valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency([u8; 3]);

impl Currency {
    pub fn as_str(&self) -> &str {
        // Constructed only from an entry of ISO_4217, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

/// The ISO-4217 codes whose minor unit is the major unit (no decimals).
const ZERO_DIGITS: &[&str] = &[
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF",
    "XPF",
];
/// The ISO-4217 codes with three decimals.
const THREE_DIGITS: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];

impl Currency {
    /// How many decimals the currency's major unit has (ISO 4217's minor unit: KRW 0,
    /// USD 2, KWD 3): an amount of minor units is `major × 10^digits`.
    pub fn minor_digits(&self) -> u32 {
        if ZERO_DIGITS.contains(&self.as_str()) {
            0
        } else if THREE_DIGITS.contains(&self.as_str()) {
            3
        } else {
            2
        }
    }
}

/// Why a decimal amount in major units is not a positive amount of minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MajorError {
    #[error("not a decimal number")]
    Malformed,
    #[error("must be greater than 0")]
    NotPositive,
    #[error("at most {0} decimals")]
    TooPrecise(u32),
    #[error("too large")]
    TooLarge,
}

impl Currency {
    /// The minor units of a positive decimal amount in this currency's major unit
    /// (`"12.5"` USD → 1250, `"12000"` KRW → 12000; a `+` sign and trailing zeros allowed).
    ///
    /// # Errors
    /// [`MajorError`]: not a plain decimal, zero or negative, more decimals than the
    /// currency has, or more than 64 bits of minor units.
    pub fn minor_of_major(&self, text: &str) -> Result<i64, MajorError> {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        let int = int.strip_prefix('+').unwrap_or(int);
        if int.starts_with('-') {
            return Err(MajorError::NotPositive);
        }
        let valid = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !valid(int) || !valid(frac) {
            return Err(MajorError::Malformed);
        }
        let frac = frac.trim_end_matches('0');
        let digits = self.minor_digits();
        let width = digits as usize;
        if frac.len() > width {
            return Err(MajorError::TooPrecise(digits));
        }
        let int = int.trim_start_matches('0');
        let whole: i64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| MajorError::TooLarge)? };
        let frac_units: i64 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<width$}").parse().map_err(|_| MajorError::TooLarge)?
        };
        let minor = whole
            .checked_mul(10_i64.pow(digits))
            .and_then(|m| m.checked_add(frac_units))
            .ok_or(MajorError::TooLarge)?;
        if minor <= 0 {
            return Err(MajorError::NotPositive);
        }
        Ok(minor)
    }
}

impl FromStr for Currency {
    type Err = MoneyError;

    /// Accepts exactly one of the known upper-case codes; `usd` or `US$` are refused.
    fn from_str(code: &str) -> Result<Self, Self::Err> {
        if ISO_4217.binary_search(&code).is_ok() {
            let b = code.as_bytes();
            Ok(Self([b[0], b[1], b[2]]))
        } else {
            Err(MoneyError::UnknownCurrency(code.chars().take(16).collect()))
        }
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-negative amount of minor units of one currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Money {
    minor: i64,
    currency: Currency,
}

impl Money {
    pub fn new(minor: i64, currency: Currency) -> Result<Self, MoneyError> {
        if minor < 0 {
            return Err(MoneyError::Negative);
        }
        Ok(Self { minor, currency })
    }

    pub fn zero(currency: Currency) -> Self {
        Self { minor: 0, currency }
    }

    pub fn minor(&self) -> i64 {
        self.minor
    }

    /// The amount in its currency's major unit as plain decimal text, no trailing zeros
    /// (`12000` won, `12.5` dollars, `0.05`, `1.234` dinars).
    pub fn major_text(&self) -> String {
        let digits = self.currency.minor_digits();
        if digits == 0 {
            return self.minor.to_string();
        }
        let scale = 10_i64.pow(digits);
        let text = format!("{}.{:0width$}", self.minor / scale, self.minor % scale, width = digits as usize);
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    pub fn checked_add(self, other: Money) -> Result<Money, MoneyError> {
        if self.currency != other.currency {
            return Err(MoneyError::CurrencyMismatch { left: self.currency, right: other.currency });
        }
        let minor = self.minor.checked_add(other.minor).ok_or(MoneyError::Overflow)?;
        Ok(Money { minor, currency: self.currency })
    }

    pub fn checked_mul(self, factor: i64) -> Result<Money, MoneyError> {
        if factor < 0 {
            return Err(MoneyError::Negative);
        }
        let minor = self.minor.checked_mul(factor).ok_or(MoneyError::Overflow)?;
        Ok(Money { minor, currency: self.currency })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.minor, self.currency)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn major_units_read_and_written_per_currency() {
        let (krw, usd, kwd): (Currency, Currency, Currency) =
            ("KRW".parse().unwrap(), "USD".parse().unwrap(), "KWD".parse().unwrap());
        assert_eq!(krw.minor_of_major("+12000.00"), Ok(12000));
        assert_eq!(usd.minor_of_major("12.5"), Ok(1250));
        assert_eq!(kwd.minor_of_major("1.234"), Ok(1234));
        assert_eq!(krw.minor_of_major("12000.5"), Err(MajorError::TooPrecise(0)));
        assert_eq!(usd.minor_of_major("0.001"), Err(MajorError::TooPrecise(2)));
        assert_eq!(usd.minor_of_major("0"), Err(MajorError::NotPositive));
        assert_eq!(usd.minor_of_major("-1"), Err(MajorError::NotPositive));
        assert_eq!(usd.minor_of_major("1e3"), Err(MajorError::Malformed));
        assert_eq!(usd.minor_of_major("."), Err(MajorError::Malformed));
        assert_eq!(krw.minor_of_major("99999999999999999999"), Err(MajorError::TooLarge));
        for (minor, currency, text) in
            [(12000, krw, "12000"), (1250, usd, "12.5"), (5, usd, "0.05"), (1234, kwd, "1.234")]
        {
            let money = Money::new(minor, currency).unwrap();
            assert_eq!(money.major_text(), text);
            assert_eq!(currency.minor_of_major(&money.major_text()), Ok(minor), "round trip");
        }
    }

    use super::*;

    fn krw() -> Currency {
        "KRW".parse().unwrap()
    }

    #[test]
    fn iso_table_is_sorted_so_binary_search_is_valid() {
        assert!(ISO_4217.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn known_codes_parse_and_unknown_or_lower_case_are_refused() {
        assert_eq!("USD".parse::<Currency>().unwrap().as_str(), "USD");
        for bad in ["usd", "XXX", "US", "USDD", "", "€"] {
            assert!(matches!(bad.parse::<Currency>(), Err(MoneyError::UnknownCurrency(_))), "{bad}");
        }
    }

    #[test]
    fn minor_digits_follow_iso_4217() {
        let digits = |code: &str| code.parse::<Currency>().unwrap().minor_digits();
        assert_eq!(
            (digits("KRW"), digits("JPY"), digits("USD"), digits("EUR"), digits("KWD")),
            (0, 0, 2, 2, 3)
        );
        assert!(ZERO_DIGITS.iter().chain(THREE_DIGITS).all(|c| ISO_4217.contains(c)));
    }

    #[test]
    fn negative_amounts_are_refused() {
        assert_eq!(Money::new(-1, krw()), Err(MoneyError::Negative));
    }

    #[test]
    fn arithmetic_is_checked() {
        let max = Money::new(i64::MAX, krw()).unwrap();
        assert_eq!(max.checked_add(Money::new(1, krw()).unwrap()), Err(MoneyError::Overflow));
        assert_eq!(max.checked_mul(2), Err(MoneyError::Overflow));
        assert_eq!(Money::new(3, krw()).unwrap().checked_mul(4).unwrap().minor(), 12);
    }

    #[test]
    fn currencies_never_mix() {
        let usd = Money::new(1, "USD".parse().unwrap()).unwrap();
        assert!(matches!(
            usd.checked_add(Money::new(1, krw()).unwrap()),
            Err(MoneyError::CurrencyMismatch { .. })
        ));
    }
}
