//! The `kafka` job source against a real Kafka-protocol broker (Tansu): jobs
//! done with complete results and their offsets committed; bad jobs in the
//! dead-letter topic with their reason; several worker processes sharing a
//! topic through the consumer group, one killed mid-job and its job redone
//! by another (attempt 2).

mod util;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::{Value, json};
use util::brokers::{Broker, tansu};
use util::{bin, read_ndjson, root, stderr};

/// Group settings that join in about a second on Tansu (the defaults take ~24 s).
const FAST_GROUP: &str = "client.\"session.timeout.ms\" = 6000\nclient.\"heartbeat.interval.ms\" = 500\n";

/// A clip of exactly `frames` frames (160×96, 10 fps) made with the ffmpeg CLI.
fn clip(dir: &Path, name: &str, frames: u32) -> PathBuf {
    let out = dir.join(format!("{name}.mp4"));
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x96:rate=10"])
        .args(["-frames:v", &frames.to_string(), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-threads", "1"])
        .arg(&out)
        .status()
        .expect("run ffmpeg");
    assert!(st.success(), "ffmpeg could not make {name}");
    out
}

fn producer(b: &Broker) -> BaseProducer {
    ClientConfig::new().set("bootstrap.servers", b.addr()).set("message.timeout.ms", "10000").create().unwrap()
}

/// Send `messages` to `topic` (each to its partition, when given) and wait until the broker has them.
fn produce(b: &Broker, topic: &str, messages: &[(Option<i32>, String)]) {
    let p = producer(b);
    for (part, m) in messages {
        let mut r = BaseRecord::<(), _>::to(topic).payload(m.as_str());
        if let Some(part) = part {
            r = r.partition(*part);
        }
        p.send(r).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(15)).unwrap();
}

fn job(id: &str, uri: &Path) -> String {
    json!({"id": id, "uri": uri}).to_string()
}

/// A topic with `partitions` partitions, made with CreateTopics.
fn create_topic(b: &Broker, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", b.addr()).create().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let made =
        rt.block_on(admin.create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &AdminOptions::new())).unwrap();
    for r in made {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
}

/// The group's committed offset of each partition of `topic` (`-1`: none).
fn committed(b: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let c: BaseConsumer = ClientConfig::new().set("bootstrap.servers", b.addr()).set("group.id", group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    (0..partitions)
        .map(|p| match got.find_partition(topic, p).unwrap().offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// Every message of `topic` (all its partitions), read with `assign` (no group).
fn read_topic(b: &Broker, topic: &str, want: usize) -> Vec<Value> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.addr())
        .set("group.id", "test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let meta = c.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in meta.topics().iter().flat_map(|t| t.partitions()) {
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let t0 = Instant::now();
    while out.len() < want && t0.elapsed() < Duration::from_secs(20) {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push(serde_json::from_slice(m.payload().unwrap()).unwrap());
        }
    }
    out
}

/// A worker pipeline: jobs from `topic` → (with `model`: text detection) → one NDJSON file per job.
fn pipeline(dir: &Path, name: &str, b: &Broker, topic: &str, idle_ms: u64, model: bool) -> PathBuf {
    let toml = dir.join(format!("{name}.toml"));
    let results = if model { "boxes" } else { "jobs" };
    let stages = if model {
        format!(
            "[stages.pre]\nkind = \"preprocess\"\ninputs = [\"jobs\"]\nwidth = 320\nheight = 192\ncolor = \"bgr\"\n\
             mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\n\
             [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\nintra_threads = 1\n\n\
             [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\n",
            root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx").display()
        )
    } else {
        String::new()
    };
    std::fs::write(
        &toml,
        format!(
            "[sources.jobs]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"workers\"\nparallel = 2\n\
             dead_letter_topic = \"dead\"\nstop_when_idle_ms = {idle_ms}\n{FAST_GROUP}\n{stages}\
             [sinks.out]\nkind = \"ndjson\"\ninputs = [\"{results}\"]\npath = \"{}/{{stream}}.ndjson\"\n",
            b.addr(),
            dir.join("out").display()
        ),
    )
    .unwrap();
    toml
}

fn spawn_worker(toml: &Path, dir: &Path, name: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    bin()
        .arg("run")
        .arg(toml)
        .args(["--progress", "never", "--report"])
        .arg(dir.join(format!("{name}.json")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

/// Wait for `child` to exit within `within`; killed (and the test failed) if it does not.
fn wait_exit(child: &mut Child, within: Duration, what: &str, log: impl Fn() -> String) -> i32 {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {within:?}:\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The job and attempt each line of a result file carries, and its `seq`.
fn lines_of(p: &Path) -> Vec<(String, u64, u64)> {
    read_ndjson(p)
        .iter()
        .map(|l| {
            let j = &l["results"]["jobs"];
            (
                j["job"].as_str().unwrap_or_else(|| panic!("no results.jobs.job in {l}")).to_string(),
                j["attempt"].as_u64().unwrap(),
                l["seq"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn one_worker_completes_every_job_and_commits_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = tansu(dir.path(), "memory://tansu/");
    create_topic(&b, "jobs", 1);
    let frames = [5u32, 8, 12];
    let msgs: Vec<(Option<i32>, String)> =
        frames.iter().enumerate().map(|(i, &n)| (None, job(&format!("job-{i}"), &clip(dir.path(), &format!("c{i}"), n)))).collect();
    produce(&b, "jobs", &msgs);
    let toml = pipeline(dir.path(), "one", &b, "jobs", 3000, false);
    let o = bin().arg("run").arg(&toml).args(["--progress", "never", "--report"]).arg(dir.path().join("one.json")).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for (i, &n) in frames.iter().enumerate() {
        let lines = lines_of(&dir.path().join(format!("out/job-{i}.ndjson")));
        assert_eq!(lines.len(), n as usize, "job-{i}: {lines:?}");
        assert!(lines.iter().all(|(id, attempt, _)| *id == format!("job-{i}") && *attempt == 1), "job-{i}: {lines:?}");
        assert_eq!(lines.iter().map(|l| l.2).collect::<Vec<_>>(), (0..n as u64).collect::<Vec<_>>());
    }
    // All three done: the group's committed offset is past the last job.
    assert_eq!(committed(&b, "workers", "jobs", 1), [3], "{err}");
    let report: Value = serde_json::from_slice(&std::fs::read(dir.path().join("one.json")).unwrap()).unwrap();
    assert_eq!(report["inputs"]["complete"], 3, "{report}");
    assert!(err.contains("inputs: 3 complete, 0 failed"), "{err}");
}

#[test]
fn bad_jobs_go_to_the_dead_letter_topic_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let b = tansu(dir.path(), "memory://tansu/");
    create_topic(&b, "jobs", 1);
    let good = clip(dir.path(), "good", 6);
    let msgs = [
        "{\"id\": \"broken\", \"uri\": ".to_string(),
        json!({"id": "no-uri"}).to_string(),
        job("not-media", &root().join("samples/not-media.mp4")),
        job("good", &good),
    ];
    produce(&b, "jobs", &msgs.iter().map(|m| (None, m.clone())).collect::<Vec<_>>());
    let toml = pipeline(dir.path(), "bad", &b, "jobs", 3000, false);
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    // Failed jobs make the run's exit code 3, as failed files of a `dir` batch do.
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert_eq!(lines_of(&dir.path().join("out/good.ndjson")).len(), 6);
    let letters = read_topic(&b, "dead", 3);
    assert_eq!(letters.len(), 3, "{letters:?}\n{err}");
    let by_offset: BTreeMap<i64, &Value> = letters.iter().map(|l| (l["offset"].as_i64().unwrap(), l)).collect();
    // Bad JSON: the message as text, and serde's parse error.
    let l = by_offset[&0];
    assert_eq!(l["job"], msgs[0].as_str(), "{l}");
    assert!(l["reason"].as_str().unwrap().contains("not a job message (EOF while parsing"), "{l}");
    // Missing `uri`: the message as JSON.
    let l = by_offset[&1];
    assert_eq!(l["job"]["id"], "no-uri", "{l}");
    assert!(l["reason"].as_str().unwrap().contains("missing field `uri`"), "{l}");
    // Media that FFmpeg cannot read: the decoder's error.
    let l = by_offset[&2];
    assert_eq!(l["id"], "not-media", "{l}");
    assert!(l["reason"].as_str().unwrap().contains("not readable as media"), "{l}");
    for l in &letters {
        assert_eq!(l["topic"], "jobs", "{l}");
        assert!(l["worker"].as_str().is_some_and(|w| !w.is_empty()), "{l}");
    }
    // Dead-lettered jobs are committed with the good one: nothing is retried.
    assert_eq!(committed(&b, "workers", "jobs", 1), [4], "{err}");
}

/// The partitions a worker's log says it holds now (its last `holding` line).
fn holding(log: &str) -> Option<Vec<i32>> {
    let line = log.lines().rev().find(|l| l.contains("kafka: holding partition(s)"))?;
    let list = &line[line.find('[')? + 1..line.find(']')?];
    Some(list.split(',').filter_map(|s| s.trim().parse().ok()).collect())
}

#[test]
fn workers_share_a_topic_and_redo_the_job_of_a_killed_one() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let b = tansu(dir.path(), "memory://tansu/");
    create_topic(&b, "work", 6);
    // Long enough idle for the survivors to outlast the killed worker's session timeout (6 s).
    let toml = pipeline(dir.path(), "scale", &b, "work", 15000, true);
    let names = ["w0", "w1", "w2"];
    let mut workers: Vec<Child> = names.iter().map(|n| spawn_worker(&toml, dir.path(), n)).collect();
    // Jobs are published once the three have split the six partitions between them.
    let joined = Instant::now();
    loop {
        let held: Vec<Option<Vec<i32>>> = names.iter().map(|n| holding(&log_of(dir.path(), n))).collect();
        let all: Vec<i32> = held.iter().flatten().flatten().copied().collect();
        if held.iter().all(|h| h.as_ref().is_some_and(|h| !h.is_empty())) && all.len() == 6 && all.iter().collect::<HashSet<_>>().len() == 6
        {
            break;
        }
        assert!(
            joined.elapsed() < Duration::from_secs(60),
            "the workers did not share the partitions: {held:?}\n{}",
            log_of(dir.path(), "w0")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let short = clip(dir.path(), "short", 6);
    let long = clip(dir.path(), "long", 80);
    let mut msgs = Vec::new();
    let mut want: HashMap<String, u64> = HashMap::new();
    for i in 0..11 {
        let id = format!("job-{i:02}");
        msgs.push((Some(i % 6), job(&id, &short)));
        want.insert(id, 6);
    }
    msgs.push((Some(5), job("long", &long)));
    want.insert("long".into(), 80);
    // A poison job: the file is not media.
    msgs.push((Some(0), job("poison", &root().join("samples/not-media.mp4"))));
    produce(&b, "work", &msgs);

    // Kill the worker doing `long` once its results have started to appear.
    let started = Instant::now();
    let victim = loop {
        let holder = names.iter().position(|n| log_of(dir.path(), n).contains("job `long` started (attempt 1"));
        let out = dir.path().join("out/long.ndjson");
        if let Some(v) = holder
            && std::fs::read_to_string(&out).is_ok_and(|t| t.lines().count() >= 1)
        {
            workers[v].kill().unwrap();
            workers[v].wait().unwrap();
            break v;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "job `long` did not start:\n{}", log_of(dir.path(), "w0"));
        std::thread::sleep(Duration::from_millis(10));
    };
    let killed_log = log_of(dir.path(), names[victim]);
    assert!(!killed_log.contains("job `long`: complete"), "the worker finished `long` before it was killed:\n{killed_log}");

    let mut reports = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        if i == victim {
            continue;
        }
        let code = wait_exit(w, Duration::from_secs(90), names[i], || log_of(dir.path(), names[i]));
        // A survivor that dead-lettered the poison job ends with 3, the other with 0.
        assert!(code == 0 || code == 3, "{} exited {code}:\n{}", names[i], log_of(dir.path(), names[i]));
        reports.push(serde_json::from_slice::<Value>(&std::fs::read(dir.path().join(format!("{}.json", names[i]))).unwrap()).unwrap());
    }
    let logs: String = names.iter().map(|n| format!("--- {n}\n{}", log_of(dir.path(), n))).collect();

    // Every job has its complete results, each frame once, from one attempt.
    for (id, n) in &want {
        let lines = lines_of(&dir.path().join(format!("out/{id}.ndjson")));
        let seqs: Vec<u64> = lines.iter().map(|l| l.2).collect();
        assert_eq!(seqs, (0..*n).collect::<Vec<_>>(), "{id}\n{logs}");
        assert!(lines.iter().all(|l| l.0 == *id), "{id}");
    }
    // `long` was redone by a survivor as attempt 2.
    let long_lines = lines_of(&dir.path().join("out/long.ndjson"));
    assert!(long_lines.iter().all(|l| l.1 == 2), "attempts of long: {:?}\n{logs}", long_lines.iter().map(|l| l.1).collect::<HashSet<_>>());
    assert!(reports.iter().any(|r| r["inputs"]["redone"].as_u64().unwrap_or(0) >= 1), "{reports:?}");
    // The poison job is in the dead-letter topic with its reason, once.
    let letters = read_topic(&b, "dead", 1);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["id"], "poison");
    assert!(letters[0]["reason"].as_str().unwrap().contains("not readable as media"), "{}", letters[0]);
    // Every partition committed to its end: 13 jobs, 3 in partition 0, 2 in each other.
    assert_eq!(committed(&b, "workers", "work", 6), [3, 2, 2, 2, 2, 2], "{logs}");
    let done: u64 = reports.iter().map(|r| r["inputs"]["complete"].as_u64().unwrap()).sum();
    assert!(done >= 1, "{reports:?}");
    assert!(t0.elapsed() < Duration::from_secs(150), "took {:?}", t0.elapsed());
}

#[test]
fn a_client_property_librdkafka_rejects_is_a_located_error() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("p.toml");
    std::fs::write(
        &toml,
        "[sources.jobs]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9\"\ntopic = \"t\"\ngroup = \"g\"\n\n\
         [sources.jobs.client]\n\"no.such.property\" = 5\n\n[sinks.out]\nkind = \"null\"\ninputs = [\"jobs\"]\n",
    )
    .unwrap();
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("No such configuration property: \"no.such.property\""), "{err}");
    assert!(err.contains(&format!("--> {}:8:22", toml.display())), "{err}");
}
