//! A publishing channel's confirms: each message sent waits on its delivery tag for the
//! broker's ack, nack or return (`basic.return` comes before the ack of an unroutable
//! mandatory message), resolved by the channel's callback.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use amqprs::channel::Channel;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, oneshot};

pub(super) enum Verdict {
    Acked,
    Nacked,
    Returned(String),
}

pub(super) struct Pending {
    pub(super) message_id: String,
    pub(super) done: oneshot::Sender<Verdict>,
    pub(super) _permit: OwnedSemaphorePermit,
}

#[derive(Default)]
pub(super) struct ConfirmTable {
    pub(super) pending: BTreeMap<u64, Pending>,
    /// `message_id` -> reply of a `basic.return` whose ack has not come yet.
    pub(super) returned: HashMap<String, String>,
}

/// Shared between the publisher and the channel's callback.
#[derive(Default)]
pub(super) struct Confirms(Mutex<ConfirmTable>);

impl Confirms {
    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, ConfirmTable> {
        // A panic while holding this lock leaves plain maps behind; keep going.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn resolve(&self, tag: u64, multiple: bool, nack: bool) {
        let mut table = self.table();
        let tags: Vec<u64> =
            if multiple { table.pending.range(..=tag).map(|(t, _)| *t).collect() } else { vec![tag] };
        for tag in tags {
            if let Some(p) = table.pending.remove(&tag) {
                let returned = table.returned.remove(&p.message_id);
                let verdict = match (nack, returned) {
                    (true, _) => Verdict::Nacked,
                    (false, Some(reply)) => Verdict::Returned(reply),
                    (false, None) => Verdict::Acked,
                };
                let _ = p.done.send(verdict);
            }
        }
    }

    /// The channel is gone: every waiter learns its message is unconfirmed.
    pub(super) fn fail_all(&self) {
        let mut table = self.table();
        table.pending.clear();
        table.returned.clear();
    }
}

pub(super) struct ConfirmCallback(pub(super) Arc<Confirms>);

#[async_trait]
impl amqprs::callbacks::ChannelCallback for ConfirmCallback {
    async fn close(&mut self, _channel: &Channel, close: CloseChannel) -> Result<(), amqprs::error::Error> {
        tracing::warn!(reason = %close, "broker closed the publishing channel");
        self.0.fail_all();
        Ok(())
    }

    async fn cancel(&mut self, _channel: &Channel, _cancel: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(&mut self, _channel: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        tracing::warn!(active, "broker flow control on the publishing channel");
        Ok(true)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        self.0.resolve(ack.delivery_tag(), ack.mutiple(), false);
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        self.0.resolve(nack.delivery_tag(), nack.multiple(), true);
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        _content: Vec<u8>,
    ) {
        if let Some(id) = properties.message_id() {
            let reply = format!("{} {}", ret.reply_code(), ret.reply_text());
            self.0.table().returned.insert(id.clone(), reply);
        }
    }
}
