//! `kind = "mqtt"`: frames on `{prefix}/{stream}/results`, stream events on
//! `{prefix}/{stream}/events` (the ndjson sink's JSON), and
//! `{prefix}/available`: `online` (retained) once connected, `offline`
//! (retained) as the last will and at a clean exit.
//!
//! At QoS 1 a message is delivered at the broker's PUBACK. One thread drives
//! rumqttc's event loop and is the only one that publishes: it publishes only
//! while connected, maps each `Outgoing::Publish(pkid)` to its message in
//! request order, and after a disconnect (clean session: rumqttc drops what
//! was unacknowledged) sends everything unacknowledged again, in order, once
//! it is back (with a backoff between attempts). The [`Outbox`] bounds what
//! waits in memory and spools the rest.
//!
//! The client speaks MQTT 3.1.1 (rumqttc's v4 client), which has no user
//! properties: a message's identity across runs is in its payload (`"run"`,
//! with `stream` and `seq`; docs/messages.md).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use rumqttc::{AsyncClient, Event, EventLoop, LastWill, MqttOptions, Outgoing, Packet, QoS, TlsConfiguration};

use super::bus::{BusSink, Topics, open_outbox};
use crate::bus::{Limits, Message, Note, RunId, Transport};
use crate::config::{Diagnostic, MqttSinkConfig, NodeConfig, PipelineConfig, mask_credentials};
use crate::stages::Body;
use crate::stages::build::{Build, BuildCtx};

/// Requests that may wait in rumqttc's channel; the driver publishes no more than this ahead.
const CHANNEL: usize = 512;
/// Token of the availability message in the publish order (not an outbox message).
const AVAILABILITY: u64 = u64::MAX;

enum Cmd {
    Send(u64, Arc<Message>),
    Close,
}

/// The MQTT client of an [`MqttSink`]: the thread that drives rumqttc's event loop, and its commands.
pub struct Driver {
    tx: tokio::sync::mpsc::UnboundedSender<Cmd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Transport for Driver {
    fn submit(&mut self, token: u64, msg: &Arc<Message>) -> Result<(), String> {
        self.tx.send(Cmd::Send(token, msg.clone())).map_err(|_| "the MQTT client has stopped".to_string())
    }

    fn close(&mut self) {
        let _ = self.tx.send(Cmd::Close);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the driver thread keeps: messages not yet published in this
/// connection (by token, so in order), and those published and not acknowledged.
struct State {
    client: AsyncClient,
    qos: QoS,
    available: String,
    notes: Sender<Note>,
    /// Not published on the current connection: (message, published before).
    unsent: BTreeMap<u64, (Arc<Message>, bool)>,
    /// Published, waiting for rumqttc to give them a packet id (in order).
    awaiting: VecDeque<u64>,
    by_pkid: HashMap<u16, u64>,
    sent: HashMap<u64, Arc<Message>>,
    connected: bool,
}

impl State {
    fn publish_more(&mut self) {
        while self.connected && self.awaiting.len() < CHANNEL {
            let Some((token, (msg, again))) = self.unsent.pop_first() else { break };
            match self.client.try_publish(msg.topic.clone(), self.qos, false, msg.body.clone()) {
                Ok(()) => {
                    self.awaiting.push_back(token);
                    if again {
                        let _ = self.notes.send(Note::Resent(token));
                    }
                    self.sent.insert(token, msg);
                }
                Err(_) => {
                    self.unsent.insert(token, (msg, again));
                    break;
                }
            }
        }
    }

    fn event(&mut self, ev: Result<Event, rumqttc::ConnectionError>) -> bool {
        match ev {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                self.connected = true;
                if self.client.try_publish(self.available.clone(), QoS::AtLeastOnce, true, "online").is_ok() {
                    self.awaiting.push_back(AVAILABILITY);
                }
            }
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                if let Some(token) = self.awaiting.pop_front()
                    && token != AVAILABILITY
                {
                    if self.qos == QoS::AtMostOnce {
                        self.sent.remove(&token);
                        let _ = self.notes.send(Note::Acked(token));
                    } else {
                        self.by_pkid.insert(pkid, token);
                    }
                }
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => self.connected = false,
            Ok(Event::Incoming(Packet::PubAck(a))) => {
                if let Some(token) = self.by_pkid.remove(&a.pkid)
                    && self.sent.remove(&token).is_some()
                {
                    let _ = self.notes.send(Note::Acked(token));
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = self.notes.send(Note::Down(mask_credentials(&e.to_string()).into_owned()));
                // A new clean session forgets everything unacknowledged: sent again once connected.
                self.connected = false;
                self.awaiting.clear();
                self.by_pkid.clear();
                for (t, m) in self.sent.drain() {
                    self.unsent.insert(t, (m, true));
                }
                return false;
            }
        }
        true
    }
}

async fn drive(mut el: EventLoop, mut st: State, mut rx: tokio::sync::mpsc::UnboundedReceiver<Cmd>) {
    let mut backoff = Duration::from_millis(100);
    let mut closing = false;
    // Once closing: the `offline` message and the disconnect get this long.
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(3600 * 24 * 365);
    loop {
        st.publish_more();
        // The event loop's future is polled to completion, never dropped half-way
        // (a cancelled write could leave half a packet); commands are taken meanwhile.
        let ok = {
            let poll = el.poll();
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    ev = &mut poll => break st.event(ev),
                    _ = tokio::time::sleep_until(deadline), if closing => return,
                    cmd = rx.recv(), if !closing => match cmd {
                        Some(Cmd::Send(t, m)) => {
                            st.unsent.insert(t, (m, false));
                            st.publish_more();
                        }
                        Some(Cmd::Close) | None => {
                            closing = true;
                            deadline = tokio::time::Instant::now() + Duration::from_secs(1);
                            if st.connected {
                                let _ = st.client.try_publish(st.available.clone(), QoS::AtLeastOnce, true, "offline");
                                st.awaiting.push_back(AVAILABILITY);
                                let _ = st.client.try_disconnect();
                            }
                        }
                    },
                }
            }
        };
        if closing && !st.connected {
            return;
        }
        if ok {
            backoff = Duration::from_millis(100);
            continue;
        }
        if closing {
            return;
        }
        // Wait before reconnecting, still taking commands.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                cmd = rx.recv() => match cmd {
                    Some(Cmd::Send(t, m)) => {
                        st.unsent.insert(t, (m, false));
                    }
                    Some(Cmd::Close) | None => return,
                },
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// `kind = "mqtt"`: the bus sink over rumqttc's client.
pub type MqttSink = BusSink<Driver>;

impl MqttSink {
    /// Settings are checked here; the broker is contacted by the client's
    /// thread (a broker down at start only delays delivery).
    pub fn build(cfg: &PipelineConfig, node: &NodeConfig, c: &MqttSinkConfig, run: &RunId) -> Result<Self, Diagnostic> {
        let broker_text = cfg.expand(&c.broker)?;
        let (host, port, scheme_tls) = crate::bus::parse_mqtt_broker(&broker_text).map_err(|e| {
            cfg.diag(c.broker.span(), format!("sink `{}`: broker `{}`: {e}", node.name, mask_credentials(&broker_text)))
                .with_help("write `host:port`, `mqtt://host:port` or `mqtts://host:port`")
        })?;
        let prefix = cfg.expand(&c.prefix)?.trim_end_matches('/').to_string();
        if prefix.contains(['+', '#']) {
            return Err(cfg.diag(c.prefix.span(), "an MQTT topic prefix cannot hold `+` or `#`"));
        }
        let client_id = match &c.client_id {
            Some(id) => cfg.expand(id)?,
            None => format!("infer-stream-{}-{}", cfg.name(), node.name),
        };
        let available = format!("{prefix}/available");
        let mut opts = MqttOptions::new(client_id, host, port);
        opts.set_keep_alive(Duration::from_secs(c.keep_alive_s.max(5)))
            .set_clean_session(true)
            .set_request_channel_capacity(CHANNEL + 16)
            .set_max_packet_size(16 << 20, 16 << 20)
            .set_last_will(LastWill::new(&available, "offline", QoS::AtLeastOnce, true));
        match (&c.username, &c.password) {
            (Some(u), p) => {
                let pw = match p {
                    Some(p) => cfg.expand(p)?,
                    None => String::new(),
                };
                opts.set_credentials(cfg.expand(u)?, pw);
            }
            (None, Some(p)) => return Err(cfg.diag(p.span(), "a `password` needs a `username`")),
            (None, None) => {}
        }
        if scheme_tls || c.tls.is_some() {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let t = c.tls.clone().unwrap_or_default();
            let read = |v: &Option<toml::Spanned<String>>, what: &str| -> Result<Option<Vec<u8>>, Diagnostic> {
                let Some(v) = v else { return Ok(None) };
                let p = cfg.resolve_path(v)?;
                std::fs::read(&p).map(Some).map_err(|e| cfg.diag(v.span(), format!("cannot read the {what} {}: {e}", p.display())))
            };
            let Some(ca) = read(&t.ca, "CA certificates")? else {
                return Err(cfg
                    .diag(node.kind_span.clone(), format!("sink `{}`: TLS needs the broker's CA certificates", node.name))
                    .with_help("set `tls = { ca = \"ca.pem\" }`"));
            };
            let client_auth = match (read(&t.cert, "certificate")?, read(&t.key, "key")?) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                _ => return Err(cfg.diag(node.kind_span.clone(), "`tls.cert` and `tls.key` go together")),
            };
            opts.set_transport(rumqttc::Transport::tls_with_config(TlsConfiguration::Simple { ca, alpn: None, client_auth }));
        }
        let (client, el) = AsyncClient::new(opts, CHANNEL + 16);
        let (notes_tx, notes_rx) = crossbeam_channel::unbounded();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let qos = if c.qos == 0 { QoS::AtMostOnce } else { QoS::AtLeastOnce };
        let st = State {
            client,
            qos,
            available,
            notes: notes_tx,
            unsent: BTreeMap::new(),
            awaiting: VecDeque::new(),
            by_pkid: HashMap::new(),
            sent: HashMap::new(),
            connected: false,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| cfg.diag(node.kind_span.clone(), format!("sink `{}`: {e}", node.name)))?;
        let thread = std::thread::Builder::new()
            .name(format!("{}-mqtt", node.name))
            .spawn(move || rt.block_on(drive(el, st, rx)))
            .map_err(|e| cfg.diag(node.kind_span.clone(), format!("sink `{}`: {e}", node.name)))?;
        let limits = Limits {
            buffer_messages: c.buffer_messages.max(1),
            spool_max_bytes: c.spool_max_bytes,
            flush_timeout: Duration::from_millis(c.flush_timeout_ms),
            stall_timeout: None,
        };
        let outbox = open_outbox(cfg, node, Driver { tx, thread: Some(thread) }, notes_rx, c.spool_dir.as_ref(), limits)?;
        let target = format!("MQTT to {} under {prefix}/ at QoS {}", mask_credentials(&broker_text), c.qos);
        Ok(BusSink::new(node, outbox, run, target, Topics::Prefix(prefix), c.only_with_results))
    }
}

impl Build for MqttSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        MqttSink::build(cx.cfg, cx.node, self, cx.run).map(|s| Body::Sink(Box::new(s)))
    }
}

#[cfg(test)]
mod tests {
    use crate::bus::parse_mqtt_broker as parse_broker;

    #[test]
    fn broker_addresses() {
        assert_eq!(parse_broker("127.0.0.1:1884").unwrap(), ("127.0.0.1".into(), 1884, false));
        assert_eq!(parse_broker("mqtt://broker").unwrap(), ("broker".into(), 1883, false));
        assert_eq!(parse_broker("mqtts://broker/").unwrap(), ("broker".into(), 8883, true));
        assert_eq!(parse_broker("mqtt://u:pw@h:1").unwrap(), ("h".into(), 1, false));
        assert!(parse_broker("http://h:1").is_err());
        assert!(parse_broker("h:notaport").is_err());
    }
}
