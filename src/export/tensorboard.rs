//! TensorBoard event files, written directly: a TFRecord stream (length,
//! masked CRC-32C of the length, the bytes, their masked CRC-32C) of
//! `Event` protobufs (tensorflow/core/util/event.proto): the file version
//! first, then one `Summary` of scalar values per step. One folder per run,
//! so `tensorboard --logdir OUT` lists runs as matrix/variant/seed-N.

use super::RunData;
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
    }
    e
}

enum Body<'a> {
    Version,
    Scalars(Vec<(&'a str, f64)>),
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
    out
}

/// Writes OUT/<matrix>/<variant>/seed-N/events.out.tfevents.<t>.tricklab per run.
pub fn write(runs: &[RunData], out: &Path) -> Result<String> {
    let mut files = 0;
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
}
