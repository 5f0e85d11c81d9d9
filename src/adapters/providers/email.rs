//! The notification step by e-mail (`notification.channel = email`, docs/spec.md §13): SMTP
//! through lettre to `notification.email.smtp_url` — `smtp://` upgrades to TLS when the
//! server offers STARTTLS, `smtps://` is TLS from the start; credentials in the URL are a
//! secret, never logged. Plain text and HTML from templates compiled into the binary, Korean
//! by default (`notification.email.locale`). `Message-ID` is made from the notification's
//! id, so a receiving system can tell a retried message from a new one.
//!
//! Answers: an order without a `customerEmail` → `IGNORE` (`NO_RECIPIENT`); SMTP 4xx, a
//! refused connection or a timeout → `AUTO_RETRY`; 5xx → `MANUAL_INTERVENTION`.

use std::time::Duration;

use async_trait::async_trait;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::SetupError;
use crate::adapters::Secret;
use crate::application::ports::{NotificationRequest, Notifier, NotifyFailure};
use crate::domain::notification::FailurePolicy;

/// The reason of a notification with nobody to send to.
pub const NO_RECIPIENT: &str = "NO_RECIPIENT";

/// The language of the messages (`notification.email.locale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locale {
    Ko,
    En,
}

impl Locale {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ko" => Some(Locale::Ko),
            "en" => Some(Locale::En),
            _ => None,
        }
    }
}

/// `notification.email.*`.
#[derive(Debug, Clone)]
pub struct EmailSettings {
    pub smtp_url: Secret,
    /// `Orders <orders@shop.example>` or a bare address.
    pub from: String,
    pub locale: Locale,
    pub timeout: Duration,
}

/// The templates, compiled in.
const KO_TEXT: &str = include_str!("../../../templates/email/completed.ko.txt");
const KO_HTML: &str = include_str!("../../../templates/email/completed.ko.html");
const EN_TEXT: &str = include_str!("../../../templates/email/completed.en.txt");
const EN_HTML: &str = include_str!("../../../templates/email/completed.en.html");

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One template filled in; `html` escapes the values.
fn fill(template: &str, request: &NotificationRequest, html: bool) -> String {
    let value = |v: String| if html { html_escape(&v) } else { v };
    template
        .replace("{customer}", &value(request.customer_id.clone()))
        .replace("{number}", &request.order_number.to_string())
        .replace("{amount}", &request.amount.minor().to_string())
        .replace("{currency}", request.amount.currency().as_str())
        .replace("{order}", &request.order_id.to_string())
}

pub struct EmailNotifier {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    locale: Locale,
    /// `notification.email.timeout`: the whole exchange, not each read (a server that takes
    /// `DATA` and never answers held the paying customer's request for 300 s, issue 67).
    timeout: Duration,
}

impl EmailNotifier {
    /// # Errors
    /// The URL or the sender cannot be used (the message names neither the URL nor its
    /// credentials).
    pub fn new(settings: &EmailSettings) -> Result<Self, SetupError> {
        crate::adapters::http_client::install_tls_provider();
        let setup = |why: &str| SetupError(why.to_owned());
        let url = reqwest::Url::parse(settings.smtp_url.expose())
            .map_err(|_| setup("notification.email.smtp_url is not a URL"))?;
        let host = url.host_str().ok_or_else(|| setup("notification.email.smtp_url has no host"))?.to_owned();
        let tls = |host: &str| {
            TlsParameters::new(host.to_owned())
                .map_err(|e| SetupError(format!("TLS for the SMTP server: {e}")))
        };
        let (tls, port) = match url.scheme() {
            "smtp" => (Tls::Opportunistic(tls(&host)?), url.port().unwrap_or(25)),
            "smtps" => (Tls::Wrapper(tls(&host)?), url.port().unwrap_or(465)),
            _ => return Err(setup("notification.email.smtp_url must be smtp:// or smtps://")),
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&host)
            .port(port)
            .tls(tls)
            .timeout(Some(settings.timeout));
        if !url.username().is_empty() {
            let user = percent_decode(url.username());
            let password = percent_decode(url.password().unwrap_or_default());
            builder = builder.credentials(Credentials::new(user, password));
        }
        let from: Mailbox =
            settings.from.parse().map_err(|_| setup("notification.email.from is not an e-mail address"))?;
        Ok(EmailNotifier {
            transport: builder.build(),
            from,
            locale: settings.locale,
            timeout: settings.timeout,
        })
    }

    fn message(&self, request: &NotificationRequest, to: Mailbox) -> Result<Message, lettre::error::Error> {
        let (subject, text, html) = match self.locale {
            Locale::Ko => {
                (format!("주문이 완료되었습니다 (주문 번호 {})", request.order_number), KO_TEXT, KO_HTML)
            }
            Locale::En => (format!("Your order {} is complete", request.order_number), EN_TEXT, EN_HTML),
        };
        // `<notification id@sender's domain>`: the same on every attempt of one notification.
        let domain = self.from.email.domain().to_owned();
        Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .message_id(Some(format!("<{}@{domain}>", request.notification_id)))
            .multipart(MultiPart::alternative_plain_html(
                fill(text, request, false),
                fill(html, request, true),
            ))
    }
}

/// `%40` and the like in a URL's user or password.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Bytes, not a `str` slice: a `%` before a multi-byte character must not split it.
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        if let (b'%', Some(Ok(b))) = (bytes[i], hex.map(|h| u8::from_str_radix(h, 16))) {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[async_trait]
impl Notifier for EmailNotifier {
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure> {
        let fail = |policy, reason: String| NotifyFailure { policy, reason, retry_after: None };
        let Some(recipient) = &request.recipient else {
            return Err(fail(FailurePolicy::Ignore, NO_RECIPIENT.into()));
        };
        let to: Mailbox = recipient.parse().map_err(|_| {
            fail(FailurePolicy::ManualIntervention, "the recipient is not an e-mail address".into())
        })?;
        let message = self.message(request, to).map_err(|e| {
            fail(FailurePolicy::ManualIntervention, format!("the message cannot be built: {e}"))
        })?;
        let Ok(sent) = tokio::time::timeout(self.timeout, self.transport.send(message)).await else {
            // Perhaps delivered, perhaps not: retried under the same `Message-ID`, which a
            // mail system may use to drop the copy.
            return Err(fail(
                FailurePolicy::AutoRetry,
                format!(
                    "SMTP: no answer within {:?}; the message may have been delivered, retried under the same Message-ID",
                    self.timeout
                ),
            ));
        };
        match sent {
            Ok(_) => Ok(()),
            // 5xx: the server refused it for good (a mailbox that does not exist, a policy).
            Err(e) if e.is_permanent() => Err(fail(
                FailurePolicy::ManualIntervention,
                format!(
                    "the SMTP server refused it: {}",
                    e.status().map_or(String::new(), |c| c.to_string())
                ),
            )),
            // A 4xx: the server said "later"; nothing was taken.
            Err(e) if e.status().is_some() => Err(fail(FailurePolicy::AutoRetry, format!("SMTP: {e}"))),
            // No answer at all (a refused or dropped connection, a TLS failure): perhaps the
            // message was taken before the answer was lost — an unknown outcome, not a
            // refusal. Retried under the same `Message-ID`, which a mail system may use to
            // drop the copy; an operator reading a spent schedule is told so.
            Err(e) => Err(fail(
                FailurePolicy::AutoRetry,
                format!(
                    "SMTP: no answer ({e}); the message may have been delivered, retried under the same Message-ID"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{NotificationId, OrderId};
    use crate::domain::money::Money;

    fn request() -> NotificationRequest {
        NotificationRequest {
            notification_id: NotificationId::new(),
            order_id: OrderId::new(),
            order_number: 42,
            merchant_id: crate::domain::merchant::default_merchant_id(),
            event_type: "order.completed",
            order_status: "COMPLETED",
            amount: Money::new(30_000, "KRW".parse().unwrap()).unwrap(),
            customer_id: "<b>alice</b>".into(),
            recipient: Some("alice@example.com".into()),
            attempt: 1,
            scenario: Default::default(),
        }
    }

    #[test]
    fn the_templates_are_filled_and_html_escaped() {
        let r = request();
        let text = fill(KO_TEXT, &r, false);
        assert!(
            text.contains("주문 번호: 42") && text.contains("30000 KRW") && text.contains("<b>alice</b>"),
            "{text}"
        );
        let html = fill(EN_HTML, &r, true);
        assert!(html.contains("&lt;b&gt;alice&lt;/b&gt;") && !html.contains("<b>alice"), "{html}");
        assert!(!html.contains('{'), "every placeholder filled: {html}");
    }

    #[test]
    fn credentials_in_the_url_are_decoded() {
        assert_eq!(percent_decode("p%40ss%2Fword"), "p@ss/word");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("50%"), "50%");
        assert_eq!(percent_decode("%가나"), "%가나", "never splits a character");
    }
}
