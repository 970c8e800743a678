//! TensorBoard event files, written directly: a TFRecord stream (length,
//! masked CRC-32C of the length, the bytes, their masked CRC-32C) of
//! `Event` protobufs (tensorflow/core/util/event.proto): the file version
//! first, then one `Summary` of scalar values per step. One folder per run,
//! so `tensorboard --logdir OUT` lists runs as matrix/session/variant/seed-N.
//!
//! Hyperparameters go through the HParams plugin's own summaries
//! (tensorboard/plugins/hparams/plugin_data.proto, api.proto, and
//! summary_v2.py's `hparams_pb` / `hparams_config_pb`, which this mirrors):
//! each run starts with a `_hparams_/session_start_info` (its hparams map)
//! and ends with a `_hparams_/session_end_info` (done or failed), and OUT's
//! own event file holds the `_hparams_/experiment` naming every hparam with
//! its type and the summary metrics, so that the HParams tab lists the runs
//! as rows to sort and filter.

use super::{Param, RunData};
use anyhow::{Context, Result};
use std::path::Path;

/// CRC-32C (Castagnoli), bitwise: event files are small.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// TFRecord's masking, so that a CRC of data holding CRCs stays strong.
fn masked(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xA282_EAD8)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, ((field as u64) << 3) | wire as u64);
}

fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn double_field(out: &mut Vec<u8>, field: u32, v: f64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    varint(out, v);
}

/// The HParams plugin's summary tags (metadata.py).
const EXPERIMENT_TAG: &str = "_hparams_/experiment";
const SESSION_START_TAG: &str = "_hparams_/session_start_info";
const SESSION_END_TAG: &str = "_hparams_/session_end_info";

/// `google.protobuf.Value { number_value = 2 | string_value = 3 | bool_value = 4 }`.
fn proto_value(p: &Param) -> Vec<u8> {
    let mut v = Vec::new();
    match p {
        Param::Num(x) => double_field(&mut v, 2, *x),
        Param::Text(s) => bytes_field(&mut v, 3, s.as_bytes()),
        Param::Bool(b) => varint_field(&mut v, 4, u64::from(*b)),
    }
    v
}

/// `api.proto` DataType: STRING = 1, BOOL = 2, FLOAT64 = 3.
fn data_type(p: &Param) -> u64 {
    match p {
        Param::Text(_) => 1,
        Param::Bool(_) => 2,
        Param::Num(_) => 3,
    }
}

/// `HParamsPluginData { version = 1 (0, left out), experiment = 2 |
/// session_start_info = 3 | session_end_info = 4 }` around one message.
fn plugin_content(field: u32, message: &[u8]) -> Vec<u8> {
    let mut c = Vec::new();
    bytes_field(&mut c, field, message);
    c
}

/// `SessionStartInfo { hparams = 1 (map<string, Value>), group_name = 4,
/// start_time_secs = 5 }`: one group per run, so that each is a row.
fn session_start(r: &RunData, wall: f64) -> Vec<u8> {
    let mut info = Vec::new();
    for (k, v) in r.params() {
        let mut entry = Vec::new();
        bytes_field(&mut entry, 1, k.as_bytes());
        bytes_field(&mut entry, 2, &proto_value(&v));
        bytes_field(&mut info, 1, &entry);
    }
    bytes_field(&mut info, 4, r.name.as_bytes());
    double_field(&mut info, 5, wall);
    plugin_content(3, &info)
}

/// `SessionEndInfo { status = 1 (SUCCESS = 1, FAILURE = 2), end_time_secs = 2 }`.
fn session_end(r: &RunData, wall: f64) -> Vec<u8> {
    let mut info = Vec::new();
    let done = r.row.status == crate::store::Ended::Done;
    varint_field(&mut info, 1, if done { 1 } else { 2 });
    double_field(&mut info, 2, wall);
    plugin_content(4, &info)
}

/// `Experiment { time_created_secs = 3, hparam_infos = 4 { name = 1, type = 4 },
/// metric_infos = 5 { name = 1 { tag = 2 } } }`: every hparam any run has,
/// typed by its first value, and every summary metric.
fn experiment(runs: &[RunData], wall: f64) -> Vec<u8> {
    let mut hparams: Vec<(&'static str, u64)> = Vec::new();
    let mut metrics: Vec<&'static str> = Vec::new();
    for r in runs {
        for (k, v) in r.params() {
            if !hparams.iter().any(|(n, _)| *n == k) {
                hparams.push((k, data_type(&v)));
            }
        }
        for (k, _) in r.summary() {
            if !metrics.contains(&k) {
                metrics.push(k);
            }
        }
    }
    let mut e = Vec::new();
    double_field(&mut e, 3, wall);
    for (name, ty) in hparams {
        let mut info = Vec::new();
        bytes_field(&mut info, 1, name.as_bytes());
        varint_field(&mut info, 4, ty);
        bytes_field(&mut e, 4, &info);
    }
    for m in metrics {
        let mut name = Vec::new();
        bytes_field(&mut name, 2, format!("summary/{m}").as_bytes());
        let mut info = Vec::new();
        bytes_field(&mut info, 1, &name);
        bytes_field(&mut e, 5, &info);
    }
    plugin_content(2, &e)
}

/// `Event { wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5 }`.
fn event(wall_time: f64, step: i64, body: Body) -> Vec<u8> {
    let mut e = Vec::new();
    key(&mut e, 1, 1);
    e.extend_from_slice(&wall_time.to_le_bytes());
    key(&mut e, 2, 0);
    varint(&mut e, step as u64);
    match body {
        Body::Version => bytes_field(&mut e, 3, b"brain.Event:2"),
        Body::Scalars(values) => {
            // Summary { repeated Value value = 1 }, Value { tag = 1, simple_value = 2 (float) }.
            let mut summary = Vec::new();
            for (tag, v) in values {
                let mut value = Vec::new();
                bytes_field(&mut value, 1, tag.as_bytes());
                key(&mut value, 2, 5);
                value.extend_from_slice(&(v as f32).to_le_bytes());
                bytes_field(&mut summary, 1, &value);
            }
            bytes_field(&mut e, 5, &summary);
        }
        Body::Plugin(tag, content) => {
            // Value { tag = 1, metadata = 9 { plugin_data = 1 { plugin_name = 1,
            // content = 2 } }, tensor = 8 }: the tensor an empty float one
            // (dtype DT_FLOAT, shape [0]), as metadata.NULL_TENSOR.
            let mut plugin = Vec::new();
            bytes_field(&mut plugin, 1, b"hparams");
            bytes_field(&mut plugin, 2, &content);
            let mut metadata = Vec::new();
            bytes_field(&mut metadata, 1, &plugin);
            let mut value = Vec::new();
            bytes_field(&mut value, 1, tag.as_bytes());
            bytes_field(&mut value, 9, &metadata);
            bytes_field(&mut value, 8, &[0x08, 0x01, 0x12, 0x02, 0x12, 0x00]);
            let mut summary = Vec::new();
            bytes_field(&mut summary, 1, &value);
            bytes_field(&mut e, 5, &summary);
        }
    }
    e
}

enum Body<'a> {
    Version,
    Scalars(Vec<(&'a str, f64)>),
    /// One HParams plugin summary: its tag and `HParamsPluginData` bytes.
    Plugin(&'static str, Vec<u8>),
}

fn record(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked(crc32c(&len)).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked(crc32c(data)).to_le_bytes());
}

/// One run's event stream: train/* per step, eval/* per evaluation (at the
/// last step of its epoch), summary/* at the last step.
fn run_events(r: &RunData, wall: f64) -> Vec<u8> {
    let mut out = Vec::new();
    record(&mut out, &event(wall, 0, Body::Version));
    let start = Body::Plugin(SESSION_START_TAG, session_start(r, wall));
    record(&mut out, &event(wall, 0, start));
    let finite = |v: Vec<(&'static str, f64)>| -> Vec<(&'static str, f64)> {
        v.into_iter().filter(|(_, x)| x.is_finite()).collect()
    };
    for &(step, _epoch, loss, lr, bn) in &r.steps {
        let values = finite(vec![
            ("train/loss", loss),
            ("train/lr", lr),
            ("train/bn_scale_mean", bn),
        ]);
        if !values.is_empty() {
            record(&mut out, &event(wall, step as i64, Body::Scalars(values)));
        }
    }
    // An evaluation's step: the last recorded step of its epoch.
    let step_of = |epoch: f64| {
        r.steps
            .iter()
            .filter(|s| s.1 <= epoch + 1e-9)
            .map(|s| s.0)
            .max()
            .unwrap_or(0)
    };
    for &(epoch, acc, tta, train_s) in &r.evals {
        let values = finite(vec![
            ("eval/test_acc", acc),
            ("eval/test_acc_tta", tta),
            ("eval/train_s", train_s),
            ("eval/epoch", epoch),
        ]);
        let step = step_of(epoch) as i64;
        record(&mut out, &event(wall, step, Body::Scalars(values)));
    }
    let last = r.row.steps.or(r.steps.last().map(|s| s.0)).unwrap_or(0) as i64;
    let summary: Vec<(String, f64)> = r
        .summary()
        .into_iter()
        .map(|(k, v)| (format!("summary/{k}"), v))
        .collect();
    if !summary.is_empty() {
        let values = summary.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        record(&mut out, &event(wall, last, Body::Scalars(values)));
    }
    let end = Body::Plugin(SESSION_END_TAG, session_end(r, wall));
    record(&mut out, &event(wall, last, end));
    out
}

/// Writes OUT/<matrix>/<session>/<variant>/seed-N/events.out.tfevents.<t>.tricklab
/// per run, and the HParams experiment into OUT's own event file.
pub fn write(runs: &[RunData], out: &Path) -> Result<String> {
    let mut files = 0;
    let newest = runs
        .iter()
        .map(|r| r.row.finished_at.0.timestamp_micros() as f64 / 1e6)
        .fold(0.0, f64::max);
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create {}; pass a writable --out", out.display()))?;
    let mut exp = Vec::new();
    record(&mut exp, &event(newest, 0, Body::Version));
    let body = Body::Plugin(EXPERIMENT_TAG, experiment(runs, newest));
    record(&mut exp, &event(newest, 0, body));
    let file = out.join(format!("events.out.tfevents.{}.tricklab", newest as u64));
    crate::util::write_atomic(&file, &exp)?;
    for r in runs {
        let wall = r.row.finished_at.0.timestamp_micros() as f64 / 1e6;
        let dir = out.join(
            r.name
                .split('/')
                .map(|p| p.replace(['\\', '\0'], "_"))
                .collect::<Vec<_>>()
                .join("/"),
        );
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}; pass a writable --out", dir.display()))?;
        let file = dir.join(format!("events.out.tfevents.{}.tricklab", wall as u64));
        crate::util::write_atomic(&file, &run_events(r, wall))?;
        files += 1;
    }
    Ok(format!(
        "{files} event files: `tensorboard --logdir {}`",
        out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_and_its_mask_are_tfrecords() {
        // RFC 3720's check value, and TensorFlow's masking of it.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(masked(0), 0xA282_EAD8);
    }

    #[test]
    fn an_event_encodes_its_fields_in_protobuf_order() {
        let e = event(1.5, 300, Body::Scalars(vec![("a", 0.5)]));
        // wall_time (field 1, fixed64), step (field 2, varint 300 = ac 02), summary (field 5).
        assert_eq!(&e[..9], &[0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F]);
        assert_eq!(&e[9..12], &[0x10, 0xAC, 0x02]);
        // Summary → Value { tag "a", simple_value 0.5f }.
        assert_eq!(
            &e[12..],
            &[
                0x2A, 0x0A, 0x0A, 0x08, 0x0A, 0x01, b'a', 0x15, 0, 0, 0, 0x3F
            ]
        );
    }

    #[test]
    fn hparams_are_typed_protobuf_values_in_a_plugin_summary() {
        // google.protobuf.Value: number_value (field 2, fixed64), string_value
        // (field 3), bool_value (field 4, varint).
        assert_eq!(proto_value(&Param::Num(0.5))[..3], [0x11, 0, 0]);
        assert_eq!(proto_value(&Param::Num(0.5))[8], 0x3F);
        assert_eq!(proto_value(&Param::Text("sgd".into())), b"\x1a\x03sgd");
        assert_eq!(proto_value(&Param::Bool(true)), [0x20, 0x01]);
        let e = event(0.0, 0, Body::Plugin(SESSION_START_TAG, vec![0x1A, 0x00]));
        let has = |needle: &[u8]| e.windows(needle.len()).any(|w| w == needle);
        // Value { tag, metadata { plugin_data { plugin_name "hparams", content } }, tensor }.
        assert!(has(SESSION_START_TAG.as_bytes()) && has(b"\x0a\x07hparams\x12\x02\x1a\x00"));
        assert!(has(&[0x42, 0x06, 0x08, 0x01, 0x12, 0x02, 0x12, 0x00]));
    }
}
