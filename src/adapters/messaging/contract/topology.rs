//! A contract's RabbitMQ topology as data: the exchanges, queues (with their arguments) and
//! bindings it needs, in the order they are declared. The contract says what; the AMQP
//! adapter declares it (`amqp::declare`), the same way for every contract. Ours is made from
//! `broker.*`'s names ([`MeetingTopology`]); a platform's own (`momo`) is fixed, as that
//! platform declares it.

/// The kind of queue the consumers declare (`broker.queue_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    Classic,
    /// Replicated (RabbitMQ quorum queues), with a delivery limit.
    Quorum,
}

/// A queue argument's value, typed as the other side's client writes it (RabbitMQ compares
/// types when it checks that two declarations are equivalent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Argument {
    /// A long string (`S`).
    Text(String),
    /// A signed 32-bit int (`I`): a Java `Integer`.
    Int(i32),
    /// A signed 64-bit int (`l`).
    Long(i64),
}

/// A durable exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub name: String,
    /// `topic`, `direct`.
    pub kind: &'static str,
}

/// A durable queue, its arguments, and the one binding that feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    pub name: String,
    pub arguments: Vec<(&'static str, Argument)>,
    /// (exchange, routing key).
    pub binding: (String, String),
}

/// What a contract declares on RabbitMQ, and where the meeting service's messages arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub exchanges: Vec<Exchange>,
    /// Declared and bound in this order (a queue's dead-letter queue before it).
    pub queues: Vec<Queue>,
    /// The queues the consumers read: registrations, cancellations, deletions.
    pub inbound: [String; 3],
}

/// Names and kinds of our inbound topology (`broker.*`).
#[derive(Debug, Clone)]
pub struct MeetingTopology {
    pub exchange: String,
    pub dead_letter_exchange: String,
    pub register_queue: String,
    pub cancel_queue: String,
    pub deleted_queue: String,
    pub queue_type: QueueType,
    pub delivery_limit: u32,
}

impl MeetingTopology {
    /// Our topology: the meeting exchange and the dead-letter exchange (topic, durable); each
    /// queue bound to its event type, dead-lettered to the dead-letter exchange under its own
    /// name, which binds its `<queue>.dlq`. Quorum queues carry their delivery limit.
    pub fn topology(&self) -> Topology {
        let text = |value: &str| Argument::Text(value.to_owned());
        let quorum = self.queue_type == QueueType::Quorum;
        let mut queues = Vec::with_capacity(6);
        for (queue, routing_key) in [
            (&self.register_queue, "meeting.participant.registered"),
            (&self.cancel_queue, "meeting.participant.cancelled"),
            (&self.deleted_queue, "meeting.deleted"),
        ] {
            let mut arguments = vec![
                ("x-dead-letter-exchange", text(&self.dead_letter_exchange)),
                ("x-dead-letter-routing-key", text(queue)),
            ];
            let mut dlq_arguments = Vec::new();
            if quorum {
                arguments.push(("x-queue-type", text("quorum")));
                arguments.push(("x-delivery-limit", Argument::Long(i64::from(self.delivery_limit))));
                dlq_arguments.push(("x-queue-type", text("quorum")));
            }
            queues.push(Queue {
                name: format!("{queue}.dlq"),
                arguments: dlq_arguments,
                binding: (self.dead_letter_exchange.clone(), queue.clone()),
            });
            queues.push(Queue {
                name: queue.clone(),
                arguments,
                binding: (self.exchange.clone(), routing_key.to_owned()),
            });
        }
        Topology {
            exchanges: [&self.exchange, &self.dead_letter_exchange]
                .map(|name| Exchange { name: name.clone(), kind: "topic" })
                .into(),
            queues,
            inbound: [self.register_queue.clone(), self.cancel_queue.clone(), self.deleted_queue.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Argument, MeetingTopology, QueueType};

    fn ours(queue_type: QueueType) -> MeetingTopology {
        MeetingTopology {
            exchange: "meeting.events".into(),
            dead_letter_exchange: "meeting.dlx".into(),
            register_queue: "r".into(),
            cancel_queue: "c".into(),
            deleted_queue: "d".into(),
            queue_type,
            delivery_limit: 5,
        }
    }

    #[test]
    fn each_of_our_queues_comes_after_its_dead_letter_queue_and_quorum_ones_carry_their_limit() {
        let classic = ours(QueueType::Classic).topology();
        let order: Vec<(&str, &str, &str)> = classic
            .queues
            .iter()
            .map(|q| (q.name.as_str(), q.binding.0.as_str(), q.binding.1.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("r.dlq", "meeting.dlx", "r"),
                ("r", "meeting.events", "meeting.participant.registered"),
                ("c.dlq", "meeting.dlx", "c"),
                ("c", "meeting.events", "meeting.participant.cancelled"),
                ("d.dlq", "meeting.dlx", "d"),
                ("d", "meeting.events", "meeting.deleted"),
            ]
        );
        assert_eq!(classic.inbound, ["r", "c", "d"].map(String::from));
        assert!(classic.queues[0].arguments.is_empty());
        assert_eq!(
            classic.queues[1].arguments,
            [
                ("x-dead-letter-exchange", Argument::Text("meeting.dlx".into())),
                ("x-dead-letter-routing-key", Argument::Text("r".into())),
            ]
        );
        let quorum = ours(QueueType::Quorum).topology();
        assert_eq!(quorum.queues[0].arguments, [("x-queue-type", Argument::Text("quorum".into()))]);
        assert!(quorum.queues[1].arguments.contains(&("x-delivery-limit", Argument::Long(5))));
    }
}
