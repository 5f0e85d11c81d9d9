//! What the provider pays out (docs/spec.md §13, "What Toss pays out"): the provider's
//! settlement rows of one sold day matched with our payments and refunds — each row's fee,
//! VAT and payout recorded against the transaction of ours it settles ([`Payout`]), each
//! disagreement a [`Finding`] (`PAYOUT_MISMATCH`, `SETTLEMENT_UNKNOWN`,
//! `SETTLEMENT_MISSING`). Pure: the worker fetches both sides.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::ids::PaymentId;
use super::ledger::{Books, Finding, FindingKind};
use super::payment::{PaymentStatus, RefundStatus};

/// One row of the provider's settlements (a transaction settled: an approval, or a cancel
/// with a negative amount), as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRow {
    pub transaction_key: Option<String>,
    pub payment_key: Option<String>,
    pub order_id: Option<String>,
    /// Signed: a cancel is negative.
    pub amount: i64,
    /// The provider's whole fee, VAT included.
    pub fee: i64,
    pub supply_amount: Option<i64>,
    pub vat: Option<i64>,
    pub pay_out_amount: i64,
    pub sold_date: NaiveDate,
    pub paid_out_date: NaiveDate,
}

/// A settlement recorded against a transaction of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payout {
    /// What of ours it settles, stable across runs: `{payment}:approval`,
    /// `{payment}:refund:{refund}`, or `{payment}:cancel` (a compensation's whole cancel).
    pub source: String,
    pub payment_id: PaymentId,
    pub transaction_key: Option<String>,
    pub amount: i64,
    pub fee: i64,
    pub supply_amount: Option<i64>,
    pub vat: Option<i64>,
    pub pay_out_amount: i64,
    pub sold_date: NaiveDate,
    pub paid_out_date: NaiveDate,
}

/// One payment's payouts netted (its approval and its cancels): what the order detail shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentPayout {
    pub fee: i64,
    pub pay_out_amount: i64,
    pub sold_date: NaiveDate,
    pub paid_out_date: NaiveDate,
}

impl PaymentPayout {
    /// `payouts` of one payment netted; the dates are its approval's (the first sold).
    pub fn net(payouts: &[Payout]) -> Option<PaymentPayout> {
        let first = payouts.iter().min_by_key(|p| (p.sold_date, p.amount < 0))?;
        Some(PaymentPayout {
            fee: payouts.iter().map(|p| p.fee).sum(),
            pay_out_amount: payouts.iter().map(|p| p.pay_out_amount).sum(),
            sold_date: first.sold_date,
            paid_out_date: first.paid_out_date,
        })
    }
}

/// What one day's settlement rows matched so far: the sources settled (for the missing),
/// the payouts to record, the findings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    pub sources: HashSet<String>,
    pub payouts: Vec<Payout>,
    pub findings: Vec<Finding>,
}

impl Settled {
    /// Matches `rows` (a page) with `books` (every payment of ours the page names):
    /// `transactionKey` first (a refund's cancel), then `paymentKey` and the signed amount
    /// (an approval; a cancel we hold no key of). A row repeated is matched once.
    pub fn match_rows(&mut self, rows: &[SettlementRow], books: &[Books]) {
        let by_payment: HashMap<&str, &Books> =
            books.iter().filter_map(|b| Some((b.payment.provider_transaction_id.as_deref()?, b))).collect();
        let by_cancel: HashMap<&str, &Books> = books
            .iter()
            .flat_map(|b| {
                b.refunds.iter().filter_map(move |r| Some((r.provider_transaction_key.as_deref()?, b)))
            })
            .collect();
        for row in rows {
            let book = row
                .transaction_key
                .as_deref()
                .and_then(|k| by_cancel.get(k))
                .or_else(|| row.payment_key.as_deref().and_then(|k| by_payment.get(k)));
            let Some(book) = book else {
                self.findings.push(unknown(row, "a settlement of a transaction we never had"));
                continue;
            };
            let Some((source, ours)) = self.source_of(row, book) else {
                self.findings
                    .push(unknown(row, "a settlement of a transaction of this payment we never had"));
                continue;
            };
            if !self.sources.insert(source.clone()) {
                continue;
            }
            if let Some(why) = mismatch(row, ours) {
                self.findings.push(finding(FindingKind::PayoutMismatch, row, Some(ours.to_string()), why));
            }
            self.payouts.push(Payout {
                source,
                payment_id: book.payment.id,
                transaction_key: row.transaction_key.clone(),
                amount: row.amount,
                fee: row.fee,
                supply_amount: row.supply_amount,
                vat: row.vat,
                pay_out_amount: row.pay_out_amount,
                sold_date: row.sold_date,
                paid_out_date: row.paid_out_date,
            });
        }
    }

    /// The transaction of `book` a row settles, and its signed amount in our books.
    fn source_of(&self, row: &SettlementRow, book: &Books) -> Option<(String, i64)> {
        let p = &book.payment;
        if row.amount > 0 {
            return Some((format!("{}:approval", p.id), p.amount.minor()));
        }
        let succeeded = book.refunds.iter().filter(|r| r.status == RefundStatus::Succeeded);
        let keyed = row
            .transaction_key
            .as_deref()
            .and_then(|k| book.refunds.iter().find(|r| r.provider_transaction_key.as_deref() == Some(k)));
        // A cancel whose key we hold; else the first refund of that amount not yet settled.
        let refund = keyed.or_else(|| {
            succeeded.clone().find(|r| {
                -r.amount.minor() == row.amount
                    && !self.sources.contains(&format!("{}:refund:{}", p.id, r.id))
            })
        });
        if let Some(r) = refund {
            return Some((format!("{}:refund:{}", p.id, r.id), -r.amount.minor()));
        }
        // A compensation cancels the whole payment and keeps no key of its own.
        (p.status == PaymentStatus::Cancelled).then(|| (format!("{}:cancel", p.id), -p.amount.minor()))
    }

    /// Our transactions of the day `[start, end]` that no row settled, once `grace` has
    /// passed since each (before that the provider may still list it): `SETTLEMENT_MISSING`.
    pub fn missing(
        &mut self,
        books: &[Books],
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        now: DateTime<Utc>,
        grace: Duration,
    ) {
        let due = |at: DateTime<Utc>| start <= at && at <= end && at + grace <= now;
        for b in books {
            let p = &b.payment;
            let Some(key) = p.provider_transaction_id.as_deref() else { continue };
            let mut ours: Vec<(String, i64, Option<String>)> = Vec::new();
            if p.approved_at.is_some_and(due) {
                ours.push((format!("{}:approval", p.id), p.amount.minor(), None));
            }
            for r in b.refunds.iter().filter(|r| r.status == RefundStatus::Succeeded && due(r.updated_at)) {
                ours.push((
                    format!("{}:refund:{}", p.id, r.id),
                    -r.amount.minor(),
                    r.provider_transaction_key.clone(),
                ));
            }
            for (source, amount, transaction_key) in ours {
                if self.sources.contains(&source) {
                    continue;
                }
                self.findings.push(Finding {
                    kind: FindingKind::SettlementMissing,
                    payment_key: Some(key.to_owned()),
                    order_id: Some(p.payment_request_id.clone()),
                    transaction_key,
                    ours: Some(format!("{amount}")),
                    theirs: None,
                    detail: format!(
                        "no settlement from the provider {} after the transaction",
                        describe(grace)
                    ),
                });
            }
        }
    }
}

/// Why a row's numbers do not add up, if they do not: the payout is not the amount less the
/// fee, the fee is not its supply amount and VAT (where both are given), or the amount is
/// not ours.
fn mismatch(row: &SettlementRow, ours: i64) -> Option<String> {
    if row.amount != ours {
        return Some(format!("the provider settled {}, ours is {ours}", row.amount));
    }
    if row.pay_out_amount != row.amount - row.fee {
        return Some(format!(
            "payOutAmount {} is not amount {} less fee {}",
            row.pay_out_amount, row.amount, row.fee
        ));
    }
    match (row.supply_amount, row.vat) {
        (Some(supply), Some(vat)) if supply + vat != row.fee => {
            Some(format!("fee {} is not supplyAmount {supply} plus vat {vat}", row.fee))
        }
        _ => None,
    }
}

fn finding(kind: FindingKind, row: &SettlementRow, ours: Option<String>, detail: String) -> Finding {
    Finding {
        kind,
        payment_key: row.payment_key.clone(),
        order_id: row.order_id.clone(),
        transaction_key: row.transaction_key.clone(),
        ours,
        theirs: Some(format!(
            "amount {} fee {} payOutAmount {} paid out {}",
            row.amount, row.fee, row.pay_out_amount, row.paid_out_date
        )),
        detail,
    }
}

fn unknown(row: &SettlementRow, why: &str) -> Finding {
    finding(FindingKind::SettlementUnknown, row, None, why.to_owned())
}

fn describe(grace: Duration) -> String {
    if grace.num_hours() % 24 == 0 {
        format!("{} days", grace.num_days())
    } else {
        format!("{} hours", grace.num_hours())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::OrderId;
    use crate::domain::ledger::tests::books;
    use crate::domain::money::Money;
    use crate::domain::payment::Payment;

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    fn day() -> NaiveDate {
        at(1).date_naive()
    }

    /// Toss's arithmetic at 3.3 %: fee 330 of 10 000, VAT 30, supply 300.
    fn row(key: Option<&str>, pk: Option<&str>, amount: i64) -> SettlementRow {
        let fee = amount * 33 / 1000;
        let vat = (fee + fee.signum() * 5) / 11;
        SettlementRow {
            transaction_key: key.map(str::to_owned),
            payment_key: pk.map(str::to_owned),
            order_id: None,
            amount,
            fee,
            supply_amount: Some(fee - vat),
            vat: Some(vat),
            pay_out_amount: amount - fee,
            sold_date: day(),
            paid_out_date: day() + Duration::days(2),
        }
    }

    fn kinds(settled: &Settled) -> Vec<FindingKind> {
        settled.findings.iter().map(|f| f.kind).collect()
    }

    fn settle(rows: &[SettlementRow], books: &[Books], now: DateTime<Utc>) -> Settled {
        let mut settled = Settled::default();
        settled.match_rows(rows, books);
        settled.missing(books, at(0), at(23), now, Duration::days(7));
        settled
    }

    /// A case: its name, the provider's rows, when the day is run, the findings.
    type Case = (&'static str, Vec<SettlementRow>, DateTime<Utc>, Vec<FindingKind>);

    #[test]
    fn settlements_against_our_books() {
        use FindingKind::*;
        let clean = vec![row(Some("ta"), Some("pk"), 10000), row(Some("tk1"), Some("pk"), -3000)];
        let late = at(24 * 9);
        let tampered = |f: fn(&mut SettlementRow)| {
            let mut rows = clean.clone();
            f(&mut rows[0]);
            rows
        };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("a day that adds up", clean.clone(), late, vec![]),
            ("a cancel matched by paymentKey and amount when its key is not ours", vec![clean[0].clone(), row(None, Some("pk"), -3000)], late, vec![]),
            ("a payout that is not the amount less the fee", tampered(|r| r.pay_out_amount -= 1), late, vec![PayoutMismatch]),
            ("a fee that is not supply plus VAT", tampered(|r| r.vat = Some(1)), late, vec![PayoutMismatch]),
            ("another amount", tampered(|r| { r.amount = 9000; r.pay_out_amount = 9000 - r.fee; }), late, vec![PayoutMismatch]),
            ("no VAT given: nothing to check it against", tampered(|r| r.supply_amount = None), late, vec![]),
            ("a settlement of a payment we never had", [clean.clone(), vec![row(Some("tx"), Some("other"), 500)]].concat(), late, vec![SettlementUnknown]),
            ("test mode's rows without keys", [clean.clone(), vec![row(None, None, 500)]].concat(), late, vec![SettlementUnknown]),
            ("a cancel of ours the provider never made", [clean.clone(), vec![row(Some("tk9"), Some("pk"), -500)]].concat(), late, vec![SettlementUnknown]),
            ("a row listed twice counts once", [clean.clone(), vec![clean[0].clone()]].concat(), late, vec![]),
            ("not settled, within the grace", vec![clean[1].clone()], at(24 * 3), vec![]),
            ("not settled, past the grace", vec![clean[1].clone()], late, vec![SettlementMissing]),
            ("nothing settled past the grace", vec![], late, vec![SettlementMissing, SettlementMissing]),
        ];
        for (name, rows, now, expected) in cases {
            assert_eq!(kinds(&settle(&rows, &[books("pk")], now)), expected, "{name}");
        }
    }

    #[test]
    fn payouts_are_recorded_per_transaction_of_ours_and_netted_per_payment() {
        let b = books("pk");
        let settled = settle(
            &[row(Some("ta"), Some("pk"), 10000), row(Some("tk1"), Some("pk"), -3000)],
            std::slice::from_ref(&b),
            at(2),
        );
        let sources: Vec<&str> = settled.payouts.iter().map(|p| p.source.as_str()).collect();
        let approval = format!("{}:approval", b.payment.id);
        let refund = format!("{}:refund:{}", b.payment.id, b.refunds[0].id);
        assert_eq!(sources, [approval.as_str(), refund.as_str()]);
        let net = PaymentPayout::net(&settled.payouts).unwrap();
        assert_eq!((net.fee, net.pay_out_amount), (330 - 99, 9670 - 2901));
        assert_eq!((net.sold_date, net.paid_out_date), (day(), day() + Duration::days(2)));
        assert_eq!(PaymentPayout::net(&[]), None);
    }

    #[test]
    fn a_compensation_is_settled_as_a_whole_cancel() {
        let mut p =
            Payment::request(OrderId::new(), 1, Money::new(10000, "KRW".parse().unwrap()).unwrap(), at(1));
        p.approve("pk", at(1)).unwrap();
        p.cancel("settlement failed", at(1)).unwrap();
        let books = [Books { payment: p, refunds: vec![] }];
        let settled = settle(
            &[row(Some("ta"), Some("pk"), 10000), row(Some("tc"), Some("pk"), -10000)],
            &books,
            at(24 * 9),
        );
        assert_eq!(kinds(&settled), vec![]);
        assert_eq!(settled.payouts.len(), 2);
    }
}
