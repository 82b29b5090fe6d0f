//! Config loading and graph checks: exact error messages and positions.

use std::path::Path;

use super::*;

const SOURCE: &str = "[sources.cam]\nkind = \"file\"\nuri = \"clip.mp4\"\n";
const SINK: &str = "[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n";

/// Headlines (`file:line:col: message`) and helps of every error, config and graph.
fn errors(src: &str) -> Vec<(String, Option<String>)> {
    let (cfg, mut d) = parse_lenient(Path::new("p.toml"), src.to_string());
    if let Some(cfg) = cfg
        && let Err(mut g) = crate::graph::check(&cfg)
    {
        d.0.append(&mut g.0);
    }
    d.sort();
    // Files do not exist in these tests; keep the other errors.
    d.0.into_iter().filter(|d| !d.message.contains(" not found: ")).map(|d| (d.headline(), d.help)).collect()
}

fn headlines(src: &str) -> Vec<String> {
    errors(src).into_iter().map(|e| e.0).collect()
}

#[test]
fn minimal_pipeline_parses_with_paths_relative_to_the_file() {
    let cfg = parse(Path::new("dir/p.toml"), format!("{SOURCE}{SINK}")).unwrap();
    assert_eq!(cfg.nodes.len(), 2);
    assert_eq!(cfg.nodes[0].role, Role::Source);
    let NodeKind::File(f) = &cfg.nodes[0].kind else { panic!() };
    assert_eq!(cfg.resolve_path(&f.uri).unwrap(), Path::new("dir/clip.mp4"));
    assert_eq!(cfg.nodes[1].inputs[0].get_ref(), "cam");
    assert_eq!(cfg.name(), "p");
}

#[test]
fn typo_in_a_key_is_located_with_a_suggestion() {
    let src = format!("{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nhieght = 384\n{SINK}");
    let e = errors(&src);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        e[0].0,
        "p.toml:8:1: unknown field `hieght`, expected one of `width`, `height`, `resize`, `pad_value`, `color`, `mean`, `std`, `scale`, `layout`, `interpolation`, `device`, `device_id`"
    );
    assert_eq!(e[0].1.as_deref(), Some("did you mean `height`?"));
}

#[test]
fn every_bad_key_of_one_node_is_reported() {
    let src =
        format!("{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = 42\nintra_threads = \"two\"\nspinnig = true\n{SINK}");
    assert_eq!(
        headlines(&src),
        vec![
            "p.toml:7:9: invalid type: integer `42`, expected a string",
            "p.toml:8:17: invalid type: string \"two\", expected usize",
            "p.toml:9:1: unknown field `spinnig`, expected one of `model`, `providers`, `intra_threads`, `inter_threads`, `spinning`, `input`, `warmup`, `batch`, `io_binding`, `interval`, `motion`",
        ]
    );
}

#[test]
fn unknown_kind_and_missing_kind() {
    let src = format!("{SOURCE}[stages.a]\nkind = \"prepocess\"\ninputs = [\"cam\"]\n[stages.b]\ninputs = [\"cam\"]\n{SINK}");
    let e = errors(&src);
    assert_eq!(
        e[0].0,
        "p.toml:5:8: unknown stage kind `prepocess`, expected one of `preprocess`, `infer`, `text_detection`, `crop`, `text_recognition`, `detection`, `classification`, `vad`, `audio_level`, `track`, `analytics`, `redact`, `python`"
    );
    assert_eq!(e[0].1.as_deref(), Some("did you mean `preprocess`?"));
    assert_eq!(e[1].0, "p.toml:7:9: stage `b` has no `kind`");
}

#[test]
fn wrong_enum_value() {
    let src = format!("{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\nheight = 64\nlayout = \"chw\"\n{SINK}");
    assert_eq!(headlines(&src), vec!["p.toml:9:10: unknown variant `chw`, expected `nchw` or `nhwc`"]);
}

#[test]
fn missing_required_field_points_at_the_table() {
    let src = format!("{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\n{SINK}");
    assert_eq!(headlines(&src), vec!["p.toml:4:1: missing field `height`"]);
}

#[test]
fn sources_take_no_inputs_and_sinks_need_them() {
    let src = "[sources.cam]\nkind = \"file\"\nuri = \"a.mp4\"\ninputs = [\"x\"]\n[sinks.out]\nkind = \"null\"\n";
    assert_eq!(headlines(src), vec!["p.toml:4:10: source `cam` cannot have `inputs`", "p.toml:5:8: sink `out` has no `inputs`"]);
}

#[test]
fn unknown_section_and_syntax_error() {
    assert_eq!(
        headlines(&format!("{SOURCE}{SINK}[stage.x]\nkind = \"infer\"\n")),
        vec!["p.toml:7:2: unknown section `stage`, expected one of `pipeline`, `sources`, `stages`, `sinks`"]
    );
    let e = headlines("[sources.cam\nkind = 1\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.toml:1:"), "{e:?}");
}

#[test]
fn queue_settings() {
    let src =
        format!("{SOURCE}[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\nqueue = {{ capacity = 2, when_full = \"drop_oldest\" }}\n");
    let cfg = parse(Path::new("p.toml"), src).unwrap();
    let q = cfg.nodes[1].queue.unwrap();
    assert_eq!((q.capacity.get(), q.when_full), (2, Some(WhenFull::DropOldest)));
    let bad = format!("{SOURCE}[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\nqueue = {{ capacity = 0, when_full = \"drop_old\" }}\n");
    assert_eq!(headlines(&bad), vec!["p.toml:7:22: invalid value: integer `0`, expected a nonzero usize"]);
    let bad = format!("{SOURCE}[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\nqueue = {{ when_full = \"drop_old\" }}\n");
    assert_eq!(headlines(&bad), vec!["p.toml:7:23: unknown variant `drop_old`, expected one of `block`, `drop_oldest`, `drop_newest`"]);
}

#[test]
fn providers_as_names_or_tables() {
    let src = format!(
        "{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\nheight = 64\n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"m.onnx\"\nproviders = [{{ name = \"cuda\", required = true, device_id = 1 }}, \"cpu\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"det\"]\n"
    );
    let cfg = parse(Path::new("p.toml"), src).unwrap();
    let NodeKind::Infer(c) = &cfg.nodes[2].kind else { panic!() };
    assert_eq!(c.providers.get_ref()[0], ProviderSpec { required: true, device_id: 1, ..ProviderSpec::named(ProviderName::Cuda) });
    assert_eq!(c.providers.get_ref()[1].name, ProviderName::Cpu);
    let bad = format!("{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\nproviders = [\"cudnn\"]\n{SINK}");
    assert_eq!(headlines(&bad), vec!["p.toml:8:14: unknown variant `cudnn`, expected one of `tensorrt`, `cuda`, `cpu`"]);
    let trt = format!(
        "{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\nproviders = [{{ name = \"tensorrt\", fp16 = true, engine_cache = \"cache\", min_shapes = \"x:1x3x32x32\" }}, \"cpu\"]\n{SINK}"
    );
    let (cfg, _) = parse_lenient(Path::new("p.toml"), trt);
    let NodeKind::Infer(c) = &cfg.unwrap().nodes[1].kind else { panic!() };
    let t = &c.providers.get_ref()[0].tensorrt;
    assert!(t.fp16 && t.engine_cache.as_deref() == Some("cache") && t.min_shapes.as_deref() == Some("x:1x3x32x32"));
    let misplaced = format!(
        "{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\nproviders = [{{ name = \"cuda\", fp16 = true }}]\n{SINK}"
    );
    assert_eq!(
        headlines(&misplaced),
        vec!["p.toml:8:14: fp16, int8, int8_calibration_table, engine_cache, timing_cache and *_shapes apply to `tensorrt`, not `cuda`"]
    );
    let one = |providers: &str| {
        format!("{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\nproviders = [{providers}]\n{SINK}")
    };
    assert_eq!(headlines(&one("{ name = \"cuda\", device_id = -1 }")), vec!["p.toml:8:14: device_id = -1 is not a GPU index (0 or more)"]);
    assert_eq!(
        headlines(&one("{ name = \"cpu\", tf32 = false }")),
        vec!["p.toml:8:14: tf32 applies to `cuda` and `tensorrt` (its CUDA provider), not `cpu`"]
    );
    let (cfg, _) = parse_lenient(Path::new("p.toml"), one("{ name = \"cuda\", tf32 = false }, \"cuda\""));
    let NodeKind::Infer(c) = &cfg.unwrap().nodes[1].kind else { panic!() };
    assert_eq!(c.providers.get_ref().iter().map(|p| p.tf32).collect::<Vec<_>>(), vec![false, true], "tf32 is on unless turned off");
}

#[test]
fn env_vars_expand_and_unset_ones_are_errors() {
    // Cargo sets CARGO_PKG_NAME for the tests it runs.
    let cfg = parse(Path::new("p.toml"), "[sources.cam]\nkind = \"file\"\nuri = \"/media/${CARGO_PKG_NAME}.mp4\"\n".into()).unwrap();
    let NodeKind::File(f) = &cfg.nodes[0].kind else { panic!() };
    assert_eq!(cfg.resolve_path(&f.uri).unwrap(), Path::new("/media/infer-stream.mp4"));
    let cfg =
        parse(Path::new("p.toml"), "[sources.cam]\nkind = \"file\"\nuri = \"rtsp://u:${INFER_STREAM_TEST_UNSET}@h/x\"\n".into()).unwrap();
    let NodeKind::File(f) = &cfg.nodes[0].kind else { panic!() };
    let d = cfg.resolve_path(&f.uri).unwrap_err();
    assert_eq!(d.headline(), "p.toml:3:7: environment variable `INFER_STREAM_TEST_UNSET` is not set");
    assert_eq!(expand_env("a$${b}c$d").unwrap(), "a${b}c$d");
    assert_eq!(expand_env("${INFER_STREAM_TEST_UNSET:-m/yolo.onnx}").unwrap(), "m/yolo.onnx");
    assert_eq!(expand_env("${CARGO_PKG_NAME:-other}").unwrap(), "infer-stream");
}

/// A URL that comes from `${VAR}` is a URL, not a missing file: the graph
/// check looks at the expanded value (a plain missing file is still caught).
#[test]
fn urls_from_env_vars_are_not_checked_as_files() {
    let check = |uri: &str| {
        let cfg = parse(Path::new("p.toml"), format!("[sources.cam]\nkind = \"audio\"\nuri = \"{uri}\"\n{SINK}")).unwrap();
        crate::graph::check(&cfg).err().map(|d| d.0.iter().map(|d| d.message.clone()).collect::<Vec<_>>())
    };
    assert_eq!(check("${INFER_STREAM_TEST_UNSET:-rtsp://127.0.0.1:1/cam}"), None);
    assert_eq!(check("${INFER_STREAM_TEST_UNSET:-no-such-clip.wav}"), Some(vec!["media file not found: ./no-such-clip.wav".to_string()]));
}

/// A `dir` source feeds one stream per file: a video sink needs `{stream}`
/// in its path, else every file would overwrite the last.
#[test]
fn batch_into_one_video_file_is_an_error() {
    let src = "[sources.rec]\nkind = \"dir\"\npath = \"in\"\n[sinks.v]\nkind = \"video\"\ninputs = [\"rec\"]\npath = \"out/all.mp4\"\n";
    assert_eq!(
        errors(src),
        vec![(
            "p.toml:7:8: video sink `v` is fed by the `dir` source `rec`, one stream per file; a video file holds one".to_string(),
            Some("put `{stream}` in `path` for one file per input, e.g. path = \"out/{stream}.mp4\"".to_string())
        )]
    );
    assert_eq!(errors(&src.replace("out/all.mp4", "out/{stream}.mp4")), vec![]);
}

#[test]
fn unknown_input_with_suggestion() {
    let src = format!("{SOURCE}[sinks.out]\nkind = \"null\"\ninputs = [\"cma\"]\n");
    let e = errors(&src);
    assert_eq!(e[0].0, "p.toml:6:11: sink `out` names unknown input `cma`");
    assert_eq!(e[0].1.as_deref(), Some("did you mean `cam`?"));
}

#[test]
fn cycle_is_reported_as_a_chain() {
    let src = format!(
        "{SOURCE}[stages.a]\nkind = \"text_detection\"\ninputs = [\"c\"]\n[stages.b]\nkind = \"text_detection\"\ninputs = [\"a\"]\n[stages.c]\nkind = \"text_detection\"\ninputs = [\"b\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"c\"]\n"
    );
    let e = headlines(&src);
    assert!(e.iter().any(|h| h == "p.toml:9:11: cycle: [ b -> c -> a -> b ]"), "{e:?}");
}

#[test]
fn type_mismatch_names_both_ends() {
    let src = format!(
        "{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"det\"]\n"
    );
    let e = errors(&src);
    assert_eq!(
        e[0].0,
        "p.toml:6:11: type mismatch: stage `det` (infer) takes model input tensors or crop batches, but `cam` (file) produces video frames"
    );
    assert_eq!(e[0].1.as_deref(), Some("put a `preprocess` (whole frames) or `crop` (regions) stage in between and name it in `inputs`"));
}

#[test]
fn duplicate_names_and_sinks_as_inputs() {
    let src = format!("{SOURCE}[sinks.cam]\nkind = \"null\"\ninputs = [\"cam\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n");
    let e = headlines(&src);
    assert_eq!(e[0], "p.toml:4:8: name `cam` is used twice (also source `cam`)");
    let src = format!("{SOURCE}{SINK}[sinks.again]\nkind = \"null\"\ninputs = [\"out\"]\n");
    assert_eq!(headlines(&src), vec!["p.toml:9:11: `out` is a sink and produces nothing; sink `again` cannot take it as input"]);
}

#[test]
fn empty_pipeline_needs_sources_and_sinks() {
    assert_eq!(
        headlines("[pipeline]\nname = \"x\"\n"),
        vec!["p.toml:1:1: the pipeline has no sources", "p.toml:1:1: the pipeline has no sinks"]
    );
}

#[test]
fn graph_errors_show_alongside_config_errors() {
    let src = format!(
        "{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = \"x\"\nheight = 4\n[sinks.out]\nkind = \"null\"\ninputs = [\"pree\", \"pre\"]\n"
    );
    let e = headlines(&src);
    assert_eq!(e, vec!["p.toml:7:9: invalid type: string \"x\", expected u32", "p.toml:11:11: sink `out` names unknown input `pree`"]);
}

#[test]
fn postprocessors_need_models_run_on_the_right_input() {
    let head = "[sources.cam]\nkind = \"file\"\nuri = \"/dev/null\"\n[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\nheight = 64\n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"m.onnx\"\n";
    // Recognition on a whole-frame model, and a crop stage fed video.
    let src = format!(
        "{head}[stages.text]\nkind = \"text_recognition\"\ninputs = [\"det\"]\n[stages.crops]\nkind = \"crop\"\ninputs = [\"cam\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"text\", \"crops\"]\n"
    );
    assert_eq!(
        headlines(&src),
        vec![
            "p.toml:15:11: text_recognition `text` reads a model run on crops (a `crop` stage), but `det` runs on the output of `pre` (preprocess)",
            "p.toml:18:11: type mismatch: stage `crops` (crop) takes text boxes or classes or tracks, but `cam` (file) produces video frames",
        ]
    );
}

#[test]
fn metrics_addr_is_an_ip_and_port_or_a_port_on_localhost() {
    let cfg = parse(Path::new("p.toml"), format!("[pipeline]\nmetrics_addr = \"127.0.0.1:9464\"\n{SOURCE}{SINK}")).unwrap();
    assert_eq!(cfg.metrics_addr().unwrap(), Some("127.0.0.1:9464".parse().unwrap()));
    let cfg = parse(Path::new("p.toml"), format!("[pipeline]\nmetrics_addr = \"[::1]:0\"\n{SOURCE}{SINK}")).unwrap();
    assert_eq!(cfg.metrics_addr().unwrap(), Some("[::1]:0".parse().unwrap()));
    let cfg = parse(Path::new("p.toml"), format!("{SOURCE}{SINK}")).unwrap();
    assert_eq!(cfg.metrics_addr().unwrap(), None, "nothing listens unless asked");
    // A port alone stays on this machine.
    for short in ["9464", ":9464"] {
        let cfg = parse(Path::new("p.toml"), format!("[pipeline]\nmetrics_addr = \"{short}\"\n{SOURCE}{SINK}")).unwrap();
        assert_eq!(cfg.metrics_addr().unwrap(), Some("127.0.0.1:9464".parse().unwrap()), "{short}");
    }
    let e = errors(&format!("[pipeline]\nname = \"x\"\nmetrics_addr = \"localhost:9464\"\n{SOURCE}{SINK}"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, "p.toml:3:16: invalid `metrics_addr` `localhost:9464`: expected PORT or IP:PORT");
    assert_eq!(
        e[0].1.as_deref(),
        Some(
            "write a port (`9464`: this machine only), or an IP address and a port, e.g. `127.0.0.1:9464` or `0.0.0.0:9464` (every interface)"
        )
    );
    assert_eq!(
        headlines(&format!("[pipeline]\nmetrics_addr = \"99999\"\n{SOURCE}{SINK}")),
        vec!["p.toml:2:16: invalid `metrics_addr` `99999`: port `99999` is out of range (0–65535)"]
    );
    assert_eq!(
        headlines(&format!("[pipeline]\nmetrics_addr = 9464\n{SOURCE}{SINK}")),
        vec!["p.toml:2:16: invalid type: integer `9464`, expected a string"]
    );
}

#[test]
fn crop_orientation_must_name_a_classification_stage() {
    let src = format!(
        "{SOURCE}[stages.boxes]\nkind = \"text_detection\"\ninputs = [\"cam\"]\n[stages.crops]\nkind = \"crop\"\ninputs = [\"boxes\"]\norientation = \"boxes\"\n{SINK}"
    );
    let e = headlines(&src);
    assert!(
        e.contains(&"p.toml:10:15: crop `crops`: `orientation` names `boxes`, which is not a classification stage".to_string()),
        "{e:?}"
    );
}

const RTSP_SINK: &str = "[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n";

#[test]
fn rtsp_source_defaults_and_checks() {
    let cfg = parse(Path::new("p.toml"), format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"rtsp://cam/x\"\n{RTSP_SINK}")).unwrap();
    let NodeKind::Rtsp(r) = &cfg.nodes[0].kind else { panic!() };
    assert_eq!(r.transport, RtspTransport::Tcp);
    assert_eq!(
        (*r.connect_timeout_ms.get_ref(), *r.watchdog_ms.get_ref(), *r.backoff_initial_ms.get_ref(), *r.backoff_max_ms.get_ref()),
        (5000, 5000, 500, 30000)
    );
    assert!(r.reconnect && r.max_retries.is_none() && r.required);
    let src = format!(
        "[sources.cam]\nkind = \"rtsp\"\nuri = \"http://u:pw@cam/x\"\ntransport = \"udp\"\nwatchdog_ms = 50\nbackoff_initial_ms = 1000\nbackoff_max_ms = 200\n{RTSP_SINK}"
    );
    assert_eq!(
        headlines(&src),
        [
            "p.toml:3:7: rtsp `cam`: expected an rtsp:// or rtsps:// URL, got `http://u:***@cam/x`",
            "p.toml:5:15: rtsp `cam`: `watchdog_ms` must be at least 100, got 50",
            "p.toml:7:18: rtsp `cam`: `backoff_max_ms` (200) is below `backoff_initial_ms` (1000)",
        ]
    );
    assert_eq!(
        headlines(&format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"rtsp://cam\"\ntransport = \"quic\"\n{RTSP_SINK}")),
        ["p.toml:4:13: unknown variant `quic`, expected `tcp` or `udp`"]
    );
    assert_eq!((*r.probe_interval_ms.get_ref(), *r.probe_window_ms.get_ref()), (250, 90000));
    assert_eq!(
        headlines(&format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"rtsp://cam\"\nprobe_interval_ms = 10\n{RTSP_SINK}")),
        ["p.toml:4:21: rtsp `cam`: `probe_interval_ms` must be 0 (no probing) or at least 50, got 10"]
    );
    assert!(headlines(&format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"rtsp://cam\"\nprobe_interval_ms = 0\n{RTSP_SINK}")).is_empty());
}

#[test]
fn diagnostics_never_show_a_password() {
    // The error quotes the file's line, which holds the password: both are masked.
    let src = format!("[sources.cam]\nkind = \"rtsp\"\nuri = \"rtsp://admin:hunter2@cam/x\"\nwatchdog_ms = 1\n{RTSP_SINK}");
    let (cfg, _) = parse_lenient(Path::new("p.toml"), src.clone());
    let d = Diagnostic::at(Path::new("p.toml"), &src, 42..56, "cannot open rtsp://admin:hunter2@cam/x: 401");
    let text = d.to_string();
    assert!(
        !text.contains("hunter2") && text.contains("uri = \"rtsp://admin:***@cam/x\"") && text.contains("admin:***@cam/x: 401"),
        "{text}"
    );
    let g = crate::graph::check(&cfg.unwrap()).unwrap_err().to_string();
    assert!(!g.contains("hunter2") && g.contains("watchdog_ms"), "{g}");
}

#[test]
fn raw_inputs_say_what_their_bytes_are() {
    let sink = "[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n";
    // rawvideo without a size; an unknown pixel format; an unknown demuxer.
    let src = format!("[sources.cam]\nkind = \"file\"\nuri = \"-\"\nformat = \"rawvideo\"\npixel_format = \"yuv999\"\n{sink}");
    assert_eq!(
        headlines(&src),
        ["p.toml:4:10: source `cam`: rawvideo needs width and height", "p.toml:5:16: source `cam`: unknown pixel format `yuv999`"]
    );
    let src = format!("[sources.cam]\nkind = \"file\"\nuri = \"-\"\nformat = \"nosuchformat\"\n{sink}");
    assert_eq!(headlines(&src), ["p.toml:4:10: source `cam`: FFmpeg has no input format `nosuchformat`"]);
    // Raw-video keys without rawvideo.
    let src = format!("[sources.cam]\nkind = \"file\"\nuri = \"-\"\nwidth = 320\n{sink}");
    assert_eq!(headlines(&src), ["p.toml:4:9: source `cam`: pixel_format, width, height and rate describe raw video"]);
    let ok = format!(
        "[sources.cam]\nkind = \"file\"\nuri = \"-\"\nformat = \"rawvideo\"\npixel_format = \"nv12\"\nwidth = 320\nheight = 240\n{sink}"
    );
    assert_eq!(headlines(&ok), Vec::<String>::new());
    // Raw PCM needs its input rate; input_rate without raw PCM is a mistake.
    let audio = "[sinks.out]\nkind = \"null\"\ninputs = [\"mic\"]\n";
    let src = format!("[sources.mic]\nkind = \"audio\"\nuri = \"-\"\nformat = \"s16le\"\nchannels = 2\n{audio}");
    assert_eq!(headlines(&src), ["p.toml:4:10: source `mic`: raw audio needs input_rate"]);
    let src = format!("[sources.mic]\nkind = \"audio\"\nuri = \"in.wav\"\ninput_rate = 44100\n{audio}");
    assert_eq!(headlines(&src), ["p.toml:4:14: source `mic`: input_rate and channels describe raw audio"]);
}

/// Values that cannot work are located errors, not silent nonsense or
/// exhausted memory: thread counts, frame limits, durations, normalisation.
#[test]
fn impossible_values_are_located_errors() {
    let file = |extra: &str| format!("[sources.cam]\nkind = \"file\"\nuri = \"clip.mp4\"\n{extra}\n{SINK}");
    assert_eq!(
        headlines(&file("decoder_threads = 100000")),
        vec!["p.toml:4:19: 100000 threads is more than 256 (each takes memory before doing any work)"]
    );
    assert!(headlines(&file("decoder_threads = 8")).is_empty());
    assert_eq!(headlines(&file("max_frames = 0")), vec!["p.toml:4:14: max_frames = 0 would read no frame (leave it out to read them all)"]);
    let testsrc = |extra: &str| format!("[sources.cam]\nkind = \"testsrc\"\n{extra}\n{SINK}");
    for bad in ["-1.0", "nan", "inf", "0.0"] {
        let e = headlines(&testsrc(&format!("duration = {bad}")));
        assert!(e.len() == 1 && e[0].starts_with("p.toml:3:12: ") && e[0].contains("a duration must be a positive number"), "{bad}: {e:?}");
    }
    let pre = |extra: &str| {
        format!(
            "{SOURCE}[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\nheight = 64\n{extra}\n[sinks.out]\nkind = \"null\"\ninputs = [\"pre\"]\n"
        )
    };
    for bad in ["std = [0, 1, 1]", "std = [nan, 1, 1]", "std = [inf, 1, 1]"] {
        let e = headlines(&pre(bad));
        assert!(e.len() == 1 && e[0].starts_with("p.toml:9:7: ") && e[0].contains("other than 0"), "{bad}: {e:?}");
    }
    assert!(headlines(&pre("mean = [nan, 0, 0]"))[0].contains("every value must be a finite number"));
    assert!(headlines(&pre("scale = nan"))[0].starts_with("p.toml:9:9: scale = NaN"));
    assert!(headlines(&pre("std = [0.5, 0.5, 0.5]\nscale = 0.5")).is_empty());
    let infer = |extra: &str| format!("{SOURCE}[stages.det]\nkind = \"infer\"\ninputs = [\"cam\"]\nmodel = \"m.onnx\"\n{extra}\n{SINK}");
    assert_eq!(
        headlines(&infer("intra_threads = 100000")),
        vec!["p.toml:8:17: 100000 threads is more than 256 (each takes memory before doing any work)"]
    );
    assert_eq!(headlines(&infer("inter_threads = 0")), vec!["p.toml:8:17: 0 threads: at least 1 (leave the key out for the default)"]);
}

#[test]
fn node_names_must_say_something() {
    for name in ["\"\"", "\" \"", "\"a\\tb\""] {
        let e = headlines(&format!("[sources.{name}]\nkind = \"testsrc\"\n{SINK}"));
        assert!(
            e.iter().any(|e| e.starts_with("p.toml:1:10: source name ") && e.ends_with("is empty or holds control characters")),
            "{name}: {e:?}"
        );
    }
}
