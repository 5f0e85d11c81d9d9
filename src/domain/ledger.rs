//! The provider's ledger against our books (docs/spec.md §10): what one day of the
//! provider's transactions (approvals and cancels) says, matched with our payments and
//! refunds; each disagreement is a [`Finding`]. Pure: the worker fetches both sides.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::payment::{Payment, PaymentStatus, Refund, RefundStatus};

spelled!(
    /// What kind of disagreement a finding is: money moved at the provider that we never
    /// recorded (`MISSING_HERE`), money we recorded moving that the provider does not list
    /// (`MISSING_AT_PROVIDER`), another amount, another status — or a row of the provider's
    /// ledger that cannot be read (`UNREADABLE`: counted and skipped, the rest still matched).
    /// What the provider pays out (docs/spec.md §13): a settlement whose numbers do not add
    /// up or are not ours (`PAYOUT_MISMATCH`), a transaction of ours the provider has not
    /// settled within the grace (`SETTLEMENT_MISSING`), a settlement of a transaction we
    /// never had (`SETTLEMENT_UNKNOWN`).
    FindingKind {
        MissingHere => "MISSING_HERE",
        MissingAtProvider => "MISSING_AT_PROVIDER",
        AmountMismatch => "AMOUNT_MISMATCH",
        StatusMismatch => "STATUS_MISMATCH",
        Unreadable => "UNREADABLE",
        PayoutMismatch => "PAYOUT_MISMATCH",
        SettlementMissing => "SETTLEMENT_MISSING",
        SettlementUnknown => "SETTLEMENT_UNKNOWN",
        Truncated => "TRUNCATED",
    }
);

/// Whether a provider transaction took money or gave it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionKind {
    Approval,
    Cancel,
}

/// One entry of the provider's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTransaction {
    pub transaction_key: String,
    /// Our payment's provider transaction id.
    pub payment_key: String,
    /// Our payment's request id.
    pub order_id: String,
    pub kind: TransactionKind,
    /// The provider's status of the payment at that transaction.
    pub status: String,
    pub amount: i64,
    pub at: DateTime<Utc>,
}

/// One disagreement between the provider's ledger and our books.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    pub payment_key: Option<String>,
    pub order_id: Option<String>,
    pub transaction_key: Option<String>,
    /// What we have (`"APPROVED 30000"`), if anything.
    pub ours: Option<String>,
    /// What the provider has (`"DONE 30000"`), if anything.
    pub theirs: Option<String>,
    pub detail: String,
}

/// A run's findings, at most `cap` of them kept (docs/operations.md, "Ledger findings"): a
/// provider that answers rows without end cannot fill the memory or the store; what is past
/// the cap is counted in one `TRUNCATED` finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedFindings {
    kept: Vec<Finding>,
    cap: usize,
    dropped: u64,
}

impl CappedFindings {
    pub fn new(cap: usize) -> Self {
        CappedFindings { kept: Vec::new(), cap, dropped: 0 }
    }

    pub fn extend(&mut self, findings: impl IntoIterator<Item = Finding>) {
        for finding in findings {
            if self.kept.len() < self.cap {
                self.kept.push(finding);
            } else {
                self.dropped += 1;
            }
        }
    }

    /// The findings kept, and one `TRUNCATED` finding counting the rest, if any.
    pub fn finish(mut self) -> Vec<Finding> {
        if self.dropped > 0 {
            self.kept.push(Finding {
                kind: FindingKind::Truncated,
                payment_key: None,
                order_id: None,
                transaction_key: None,
                ours: None,
                theirs: None,
                detail: format!(
                    "{} more findings than a run keeps ({}, payment.toss.ledger_max_findings) were counted, not kept: the provider's answers disagree with our books wholesale (a wrong key, a broken page) — look at the provider first",
                    self.dropped, self.cap
                ),
            });
        }
        self.kept
    }
}

/// A row of the provider's ledger that could not be read: its `transactionKey` if that much
/// could be, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableRow {
    pub transaction_key: Option<String>,
    pub why: String,
}

impl Finding {
    /// The finding an unreadable row of the provider's ledger is.
    pub fn unreadable(row: &UnreadableRow) -> Finding {
        Finding {
            kind: FindingKind::Unreadable,
            payment_key: None,
            order_id: None,
            transaction_key: row.transaction_key.clone(),
            ours: None,
            theirs: None,
            detail: format!("a row of the provider's ledger could not be read: {}", row.why),
        }
    }

    /// What names a finding across runs of a day: a rerun's finding with the same identity
    /// is the same finding (audited once).
    pub fn identity(&self) -> String {
        let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        format!(
            "{}|{}|{}|{}",
            self.kind,
            or_dash(&self.payment_key),
            or_dash(&self.transaction_key),
            self.detail
        )
    }
}

/// A payment of ours with its refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Books {
    pub payment: Payment,
    pub refunds: Vec<Refund>,
}

/// Statuses a payment the provider approved may have here.
fn taken(status: PaymentStatus) -> bool {
    matches!(
        status,
        PaymentStatus::Approved
            | PaymentStatus::PartiallyRefunded
            | PaymentStatus::RefundPending
            | PaymentStatus::Refunded
            | PaymentStatus::Cancelled
    )
}

fn ours_of(payment: &Payment) -> String {
    format!("{} {}", payment.status, payment.amount.minor())
}

/// Matches the provider's transactions of the day `[start, end]` with `books` (every
/// payment of ours the day may concern: approved or refunded in it, or named by one of its
/// transactions). A clean day is an empty list. [`match_theirs`] and
/// [`missing_at_provider`] are its two halves, for a ledger read page by page.
pub fn reconcile(
    theirs: &[ProviderTransaction],
    books: &[Books],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Vec<Finding> {
    let mut seen = Seen::default();
    let theirs = seen.note(theirs);
    let mut findings = match_theirs(&theirs, books);
    findings.extend(missing_at_provider(books, &seen, start, end));
    findings
}

/// What the provider listed, as far as [`missing_at_provider`] needs to know: the payment
/// keys it lists an approval for and the transaction keys of its cancels.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Seen {
    pub approvals: HashSet<String>,
    pub cancels: HashSet<String>,
}

impl Seen {
    /// Notes `theirs`; answers those not noted before (a transaction the provider lists
    /// twice, on a page it repeats, is matched once).
    pub fn note(&mut self, theirs: &[ProviderTransaction]) -> Vec<ProviderTransaction> {
        theirs
            .iter()
            .filter(|t| match t.kind {
                TransactionKind::Approval => self.approvals.insert(t.payment_key.clone()),
                TransactionKind::Cancel => self.cancels.insert(t.transaction_key.clone()),
            })
            .cloned()
            .collect()
    }
}

/// The provider's transactions against our books: money it moved that we did not record,
/// or recorded otherwise. `books` must hold every payment of ours `theirs` names.
pub fn match_theirs(theirs: &[ProviderTransaction], books: &[Books]) -> Vec<Finding> {
    let by_key: HashMap<&str, &Books> =
        books.iter().filter_map(|b| Some((b.payment.provider_transaction_id.as_deref()?, b))).collect();
    let mut findings = Vec::new();
    let finding = |kind, t: &ProviderTransaction, ours: Option<String>, detail: String| Finding {
        kind,
        payment_key: Some(t.payment_key.clone()),
        order_id: Some(t.order_id.clone()),
        transaction_key: Some(t.transaction_key.clone()),
        ours,
        theirs: Some(format!("{} {}", t.status, t.amount)),
        detail,
    };
    for t in theirs {
        let book = by_key.get(t.payment_key.as_str());
        match (t.kind, book) {
            (_, None) => findings.push(finding(
                FindingKind::MissingHere,
                t,
                None,
                "the provider moved money for a payment we do not have".into(),
            )),
            (TransactionKind::Approval, Some(b)) => {
                let p = &b.payment;
                if p.amount.minor() != t.amount {
                    findings.push(finding(
                        FindingKind::AmountMismatch,
                        t,
                        Some(ours_of(p)),
                        "the provider approved another amount".into(),
                    ));
                } else if !taken(p.status) {
                    findings.push(finding(
                        FindingKind::StatusMismatch,
                        t,
                        Some(ours_of(p)),
                        "the provider approved a payment we do not hold as taken".into(),
                    ));
                }
            }
            (TransactionKind::Cancel, Some(b)) => {
                let p = &b.payment;
                let refund = b
                    .refunds
                    .iter()
                    .find(|r| r.provider_transaction_key.as_deref() == Some(&t.transaction_key));
                match refund {
                    Some(r) if r.amount.minor() != t.amount => findings.push(finding(
                        FindingKind::AmountMismatch,
                        t,
                        Some(format!("refund {} {}", r.status, r.amount.minor())),
                        format!("refund {} has another amount", r.id),
                    )),
                    Some(r) if r.status != RefundStatus::Succeeded => findings.push(finding(
                        FindingKind::StatusMismatch,
                        t,
                        Some(format!("refund {} {}", r.status, r.amount.minor())),
                        format!("the provider cancelled what refund {} holds as not succeeded", r.id),
                    )),
                    Some(_) => {}
                    // A compensation cancels the whole payment and keeps no key of its own.
                    None if p.status == PaymentStatus::Cancelled && p.amount.minor() == t.amount => {}
                    None => findings.push(finding(
                        FindingKind::MissingHere,
                        t,
                        Some(ours_of(p)),
                        "the provider cancelled money we have no refund for".into(),
                    )),
                }
            }
        }
    }
    findings
}

/// Our books of the day `[start, end]` against what the provider listed (`seen`): money we
/// recorded moving that day that the provider does not list.
pub fn missing_at_provider(
    books: &[Books],
    seen: &Seen,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let (approvals, cancels) = (&seen.approvals, &seen.cancels);
    let within = |at: DateTime<Utc>| start <= at && at <= end;
    for b in books {
        let p = &b.payment;
        let Some(key) = p.provider_transaction_id.as_deref() else { continue };
        if p.approved_at.is_some_and(within) && !approvals.contains(key) {
            findings.push(Finding {
                kind: FindingKind::MissingAtProvider,
                payment_key: Some(key.to_owned()),
                order_id: Some(p.payment_request_id.clone()),
                transaction_key: None,
                ours: Some(ours_of(p)),
                theirs: None,
                detail: "we hold this payment as approved that day; the provider lists no approval".into(),
            });
        }
        for r in &b.refunds {
            let Some(tk) = r.provider_transaction_key.as_deref() else { continue };
            if r.status == RefundStatus::Succeeded && within(r.updated_at) && !cancels.contains(tk) {
                findings.push(Finding {
                    kind: FindingKind::MissingAtProvider,
                    payment_key: Some(key.to_owned()),
                    order_id: Some(p.payment_request_id.clone()),
                    transaction_key: Some(tk.to_owned()),
                    ours: Some(format!("refund SUCCEEDED {}", r.amount.minor())),
                    theirs: None,
                    detail: format!("refund {} succeeded that day; the provider lists no such cancel", r.id),
                });
            }
        }
    }
    findings
}

#[cfg(test)]
pub(super) mod tests {

    #[test]
    fn a_run_keeps_its_first_findings_and_counts_the_rest() {
        let row = |n: usize| {
            Finding::unreadable(&UnreadableRow { transaction_key: Some(format!("t{n}")), why: "x".into() })
        };
        let mut few = CappedFindings::new(10);
        few.extend((0..3).map(row));
        assert_eq!(few.finish().len(), 3, "under the cap: all, no TRUNCATED");
        let mut many = CappedFindings::new(10);
        many.extend((0..260).map(row));
        many.extend((0..50).map(row));
        let kept = many.finish();
        assert_eq!(kept.len(), 11);
        let last = kept.last().unwrap();
        assert_eq!(last.kind, FindingKind::Truncated);
        assert!(last.detail.starts_with("300 more findings"), "{}", last.detail);
        assert_eq!(kept[0].transaction_key.as_deref(), Some("t0"), "the first ones kept");
    }

    use super::*;
    use crate::domain::ids::OrderId;
    use crate::domain::money::Money;

    fn at(h: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + i64::from(h) * 3600, 0).unwrap()
    }

    fn day() -> (DateTime<Utc>, DateTime<Utc>) {
        (at(0), at(23))
    }

    /// A payment of 10 000 approved at `at(1)` with key `pk`, partly refunded 3 000 (key
    /// `tk1`); the payouts' tests settle the same books.
    pub(in crate::domain) fn books(pk: &str) -> Books {
        let mut p =
            Payment::request(OrderId::new(), 1, Money::new(10000, "KRW".parse().unwrap()).unwrap(), at(1));
        p.approve(pk, at(1)).unwrap();
        let mut r = p.begin_refund(Some(3000), "r", "alice", None, at(2)).unwrap();
        p.refund(&mut r, Some("tk1".into()), at(2)).unwrap();
        Books { payment: p, refunds: vec![r] }
    }

    fn tx(key: &str, pk: &str, kind: TransactionKind, amount: i64) -> ProviderTransaction {
        ProviderTransaction {
            transaction_key: key.into(),
            payment_key: pk.into(),
            order_id: "pay-x".into(),
            kind,
            status: if kind == TransactionKind::Approval { "DONE".into() } else { "PARTIAL_CANCELED".into() },
            amount,
            at: at(1),
        }
    }

    fn kinds(findings: &[Finding]) -> Vec<FindingKind> {
        findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn the_ledger_against_our_books() {
        use FindingKind::*;
        use TransactionKind::*;
        let (start, end) = day();
        let clean = vec![tx("ta", "pk", Approval, 10000), tx("tk1", "pk", Cancel, 3000)];
        let cases: Vec<(&str, Vec<ProviderTransaction>, Vec<FindingKind>)> = vec![
            ("a day that agrees", clean.clone(), vec![]),
            (
                "an approval we never saw",
                [clean.clone(), vec![tx("tb", "other", Approval, 500)]].concat(),
                vec![MissingHere],
            ),
            (
                "a cancel we have no refund for",
                [clean.clone(), vec![tx("tk9", "pk", Cancel, 500)]].concat(),
                vec![MissingHere],
            ),
            (
                "another approved amount",
                vec![tx("ta", "pk", Approval, 9000), tx("tk1", "pk", Cancel, 3000)],
                vec![AmountMismatch],
            ),
            (
                "another cancelled amount",
                vec![tx("ta", "pk", Approval, 10000), tx("tk1", "pk", Cancel, 2000)],
                vec![AmountMismatch],
            ),
            ("our approval not listed", vec![tx("tk1", "pk", Cancel, 3000)], vec![MissingAtProvider]),
            ("our refund not listed", vec![tx("ta", "pk", Approval, 10000)], vec![MissingAtProvider]),
        ];
        for (name, theirs, expected) in cases {
            assert_eq!(kinds(&reconcile(&theirs, &[books("pk")], start, end)), expected, "{name}");
        }
    }

    #[test]
    fn statuses_that_disagree() {
        let (start, end) = day();
        // The provider approved what we hold as declined.
        let mut declined = books("pk");
        declined.payment.status = PaymentStatus::Declined;
        declined.payment.approved_at = None;
        declined.refunds.clear();
        let found = reconcile(&[tx("ta", "pk", TransactionKind::Approval, 10000)], &[declined], start, end);
        assert_eq!(kinds(&found), [FindingKind::StatusMismatch]);
        assert_eq!(found[0].ours.as_deref(), Some("DECLINED 10000"));
        assert_eq!(found[0].theirs.as_deref(), Some("DONE 10000"));
        // It cancelled what we hold as a failed refund.
        let mut failed = books("pk");
        failed.refunds[0].status = RefundStatus::Failed;
        let found = reconcile(
            &[
                tx("ta", "pk", TransactionKind::Approval, 10000),
                tx("tk1", "pk", TransactionKind::Cancel, 3000),
            ],
            &[failed],
            start,
            end,
        );
        assert_eq!(kinds(&found), [FindingKind::StatusMismatch]);
    }

    #[test]
    fn a_compensation_is_a_whole_cancel_without_a_key_of_ours() {
        let (start, end) = day();
        let mut p =
            Payment::request(OrderId::new(), 1, Money::new(10000, "KRW".parse().unwrap()).unwrap(), at(1));
        p.approve("pk", at(1)).unwrap();
        p.cancel("settlement failed", at(1)).unwrap();
        let books = [Books { payment: p, refunds: vec![] }];
        let theirs = [
            tx("ta", "pk", TransactionKind::Approval, 10000),
            tx("tc", "pk", TransactionKind::Cancel, 10000),
        ];
        assert_eq!(reconcile(&theirs, &books, start, end), vec![]);
    }

    #[test]
    fn what_happened_on_another_day_is_not_missing() {
        let b = books("pk");
        // The day after: our approval and refund were the day before.
        assert_eq!(reconcile(&[], &[b], at(24), at(47)), vec![]);
    }
}
