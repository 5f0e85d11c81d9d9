//! The meetup platform (`momo-spring-project/momo-backend`, docs/spec.md §12 `momo`), judged
//! by its own declarations: its payment module's queues declared first, as Spring AMQP
//! declares them from its `PaymentQueueConfig` (Java strings as AMQP long strings, the DLQ's
//! `x-message-ttl` a Java `Integer`, which the Java client writes as a signed 32-bit int),
//! then ours — equivalent, so no 406. The names are the platform's own, fixed: each test
//! runs in a RabbitMQ vhost of its own, deleted afterwards.

use std::process::Command;

use amqprs::channel::{Channel, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect, momo};

use crate::helpers::service_missing;

/// A vhost of its own (`rabbitmqctl`), guest allowed; deleted when dropped.
struct Vhost(String);

impl Vhost {
    fn create() -> Option<Vhost> {
        let name = format!("test-momo-{}", uuid::Uuid::new_v4().simple());
        let ctl =
            |args: &[&str]| Command::new("rabbitmqctl").args(args).output().is_ok_and(|o| o.status.success());
        if !ctl(&["add_vhost", &name]) || !ctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]) {
            service_missing("rabbitmqctl (a vhost per test)", "rabbitmqctl add_vhost failed");
            return None;
        }
        Some(Vhost(name))
    }

    async fn channel(&self) -> (amqprs::connection::Connection, Channel) {
        let endpoint = AmqpEndpoint::parse(&format!("amqp://guest:guest@127.0.0.1:5672/{}", self.0)).unwrap();
        let connection = connect(&endpoint, "test-momo").await.unwrap();
        let channel = connection.open_channel(None).await.unwrap();
        (connection, channel)
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").args(["delete_vhost", &self.0]).output();
    }
}

/// The platform's own declarations, as its Spring configuration makes them.
async fn declare_as_the_platform(channel: &Channel, ttl: FieldValue) -> Result<(), amqprs::error::Error> {
    let s = |v: &str| FieldValue::S(v.try_into().unwrap());
    for (exchange, kind) in [
        ("momo.payment.events", "topic"),
        ("momo.dlx.payment", "direct"),
        ("momo.participant.events", "topic"),
        ("momo.meeting.events", "topic"),
    ] {
        channel
            .exchange_declare(ExchangeDeclareArguments::new(exchange, kind).durable(true).finish())
            .await?;
    }
    for (queue, exchange, key) in [
        ("payment.participant.registered.queue", "momo.participant.events", "participant.registered.key"),
        ("payment.participant.canceled.queue", "momo.participant.events", "participant.canceled.key"),
        ("payment.meeting.deleted.queue", "momo.meeting.events", "meeting.deleted.key"),
    ] {
        let mut args = FieldTable::new();
        args.insert("x-dead-letter-exchange".try_into().unwrap(), s("momo.dlx.payment"));
        args.insert("x-dead-letter-routing-key".try_into().unwrap(), s("payment.dlq"));
        channel
            .queue_declare(QueueDeclareArguments::new(queue).durable(true).arguments(args).finish())
            .await?;
        channel.queue_bind(QueueBindArguments::new(queue, exchange, key)).await?;
    }
    let mut args = FieldTable::new();
    args.insert("x-message-ttl".try_into().unwrap(), ttl);
    channel
        .queue_declare(QueueDeclareArguments::new("payment.dlq.queue").durable(true).arguments(args).finish())
        .await?;
    channel
        .queue_bind(QueueBindArguments::new("payment.dlq.queue", "momo.dlx.payment", "payment.dlq"))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_payment_topology_is_the_platforms_whoever_declares_first() {
    // The platform first, then us.
    let Some(vhost) = Vhost::create() else { return };
    let (_c, channel) = vhost.channel().await;
    declare_as_the_platform(&channel, FieldValue::I(604_800_000)).await.expect("the platform's declarations");
    momo::declare(&channel).await.expect("ours, equivalent: no 406");
    // Us first, then the platform (a redeploy of its payment module beside us).
    let Some(second) = Vhost::create() else { return };
    let (_c2, channel) = second.channel().await;
    momo::declare(&channel).await.unwrap();
    declare_as_the_platform(&channel, FieldValue::I(604_800_000))
        .await
        .expect("the platform after us: no 406");
}
