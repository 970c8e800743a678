//! The event protocol a training script speaks (docs/scripts.md, version 1):
//! JSON objects, one a line, appended to the file the `TRICKLAB_EVENTS`
//! environment variable names. The small Python module in `python/`
//! writes it; a script may also write it by hand.
//!
//! ```text
//! {"tricklab": 1, "steps": 1600, "epochs": 4}             optional, first: the version (and the planned length)
//! {"step": 10, "loss": 2.1, "lr": 0.4, "bn_scale": 0.9, "images": 5120}
//! {"epoch": 1, "acc": 0.52, "seconds": 3.1}
//! {"final": {"acc": 0.94, "seconds": 3.83}}
//! ```
//!
//! Accuracy is a fraction; seconds are on the script's own training clock
//! (evaluation outside it, as TRICKS.md section 5 has it). `bn_scale`,
//! `images` and `seconds` may be left out.

use serde_json::Value;
use std::io::{Read as _, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The protocol version this tricklab reads.
pub const VERSION: u64 = 1;

/// One line of the protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    /// `{"tricklab": N}`: the version the script writes, and optionally
    /// the run's planned length (`"steps"`, `"epochs"`) for its progress
    /// and ETA.
    Version {
        version: u64,
        steps: Option<u64>,
        epochs: Option<f64>,
    },
    /// A training step's readings.
    Step {
        step: u64,
        loss: f64,
        lr: f64,
        bn_scale: Option<f64>,
        /// Training images seen so far.
        images: Option<u64>,
    },
    /// An evaluation at the end of an epoch.
    Epoch {
        epoch: u64,
        acc: f64,
        /// Training seconds so far, on the script's clock.
        seconds: Option<f64>,
    },
    /// The run's result.
    Final { acc: f64, seconds: Option<f64> },
}

/// `line` as the protocol reads it, or why not, in words a script's author
/// can act on.
pub fn parse(line: &str) -> Result<Line, String> {
    let v: Value = serde_json::from_str(line.trim())
        .or_else(|e| serde_json::from_str(&quote_non_finite(line.trim())).map_err(|_| e))
        .map_err(|e| format!("not a JSON object ({e})"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let num = |o: &serde_json::Map<String, Value>, k: &str| -> Result<f64, String> {
        let x = o.get(k).ok_or_else(|| format!("no `{k}`"))?;
        as_number(x).ok_or_else(|| format!("`{k}` is not a number"))
    };
    let opt = |o: &serde_json::Map<String, Value>, k: &str| -> Result<Option<f64>, String> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => as_number(x)
                .map(Some)
                .ok_or_else(|| format!("`{k}` is not a number")),
        }
    };
    let count = |o: &serde_json::Map<String, Value>, k: &str| -> Result<u64, String> {
        o.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("`{k}` is not a whole number"))
    };
    if let Some(version) = o.get("tricklab") {
        let version = version
            .as_u64()
            .ok_or("`tricklab` (the protocol version) is not a whole number")?;
        return Ok(Line::Version {
            version,
            steps: match o.get("steps") {
                None | Some(Value::Null) => None,
                Some(_) => Some(count(o, "steps")?),
            },
            epochs: opt(o, "epochs")?,
        });
    }
    if let Some(f) = o.get("final") {
        let f = f.as_object().ok_or("`final` is not an object")?;
        return Ok(Line::Final {
            acc: fraction(num(f, "acc")?)?,
            seconds: opt(f, "seconds")?,
        });
    }
    if o.contains_key("step") {
        return Ok(Line::Step {
            step: count(o, "step")?,
            loss: num(o, "loss")?,
            lr: num(o, "lr")?,
            bn_scale: opt(o, "bn_scale")?,
            images: match o.get("images") {
                None | Some(Value::Null) => None,
                Some(_) => Some(count(o, "images")?),
            },
        });
    }
    if o.contains_key("epoch") {
        return Ok(Line::Epoch {
            epoch: count(o, "epoch")?,
            acc: fraction(num(o, "acc")?)?,
            seconds: opt(o, "seconds")?,
        });
    }
    Err("neither `step`, `epoch`, `final` nor `tricklab`".into())
}

/// Python's `json.dumps` writes a diverged loss as the bare token `NaN`
/// (or `Infinity`, `-Infinity`), which JSON has not: `line` with each such
/// token outside a string quoted, so that it reads as the number it means
/// (through [`as_number`]) and the runner sees the divergence.
fn quote_non_finite(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if !in_string
            && let Some(t) = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|t| rest.starts_with(t))
        {
            out.push_str(&format!("\"{t}\""));
            rest = &rest[t.len()..];
            continue;
        }
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else {
            in_string = c == '"';
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A JSON number, or one of the non-finite tokens [`quote_non_finite`] quoted.
fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) if s == "NaN" => Some(f64::NAN),
        Value::String(s) if s == "Infinity" => Some(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Some(f64::NEG_INFINITY),
        v => v.as_f64(),
    }
}

/// An accuracy as a fraction in [0, 1]; a percentage is named as one.
fn fraction(acc: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&acc) {
        Ok(acc)
    } else if (1.0..=100.0).contains(&acc) {
        Err(format!(
            "`acc` {acc} looks like a percentage: send a fraction ({})",
            acc / 100.0
        ))
    } else {
        Err(format!("`acc` {acc} is not a fraction in [0, 1]"))
    }
}

/// What one read of an events file found.
#[derive(Debug, Default)]
pub struct Read {
    /// The lines completed since the last read, each with its line number.
    pub lines: Vec<(usize, Line)>,
    /// A warning for each malformed one (`FILE:LINE: why`).
    pub warnings: Vec<String>,
}

/// The events file of one run, read as it grows: each call takes the
/// complete lines written since the last (a line still being written
/// waits for its newline). A malformed line is counted and named, never
/// fatal.
pub struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
    line_no: usize,
    /// Malformed lines so far.
    pub malformed: usize,
}

impl Tail {
    pub fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            offset: 0,
            partial: String::new(),
            line_no: 0,
            malformed: 0,
        }
    }

    /// The lines completed since the last call. A file not yet made reads
    /// as empty.
    pub fn read(&mut self) -> std::io::Result<Read> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Read::default());
            }
            Err(e) => return Err(e),
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let mut got = Read::default();
        while let Some(end) = self.partial.find('\n') {
            let text: String = self.partial.drain(..=end).collect();
            self.line_no += 1;
            if text.trim().is_empty() {
                continue;
            }
            match parse(&text) {
                Ok(l) => got.lines.push((self.line_no, l)),
                Err(why) => {
                    self.malformed += 1;
                    got.warnings.push(format!(
                        "{}:{}: {why}; the line is skipped (docs/scripts.md has the protocol)",
                        self.path.display(),
                        self.line_no
                    ));
                }
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_may_say_the_planned_length() {
        assert_eq!(
            parse(r#"{"tricklab": 1, "steps": 1600, "epochs": 4}"#),
            Ok(Line::Version {
                version: 1,
                steps: Some(1600),
                epochs: Some(4.0)
            })
        );
        assert!(parse(r#"{"tricklab": 1, "steps": 2.5}"#).is_err());
    }

    #[test]
    fn each_kind_of_line_reads_and_a_bad_one_says_why() {
        assert_eq!(
            parse(r#"{"tricklab": 1}"#),
            Ok(Line::Version {
                version: 1,
                steps: None,
                epochs: None
            })
        );
        assert_eq!(
            parse(r#"{"step": 10, "loss": 2.5, "lr": 0.4, "bn_scale": 0.9, "images": 5120}"#),
            Ok(Line::Step {
                step: 10,
                loss: 2.5,
                lr: 0.4,
                bn_scale: Some(0.9),
                images: Some(5120)
            })
        );
        assert_eq!(
            parse(r#"{"step": 1, "loss": 2.5, "lr": 0.1}"#),
            Ok(Line::Step {
                step: 1,
                loss: 2.5,
                lr: 0.1,
                bn_scale: None,
                images: None
            })
        );
        assert_eq!(
            parse(r#"{"epoch": 2, "acc": 0.5, "seconds": 3.25}"#),
            Ok(Line::Epoch {
                epoch: 2,
                acc: 0.5,
                seconds: Some(3.25)
            })
        );
        assert_eq!(
            parse(r#"{"final": {"acc": 0.94, "seconds": 3.83}}"#),
            Ok(Line::Final {
                acc: 0.94,
                seconds: Some(3.83)
            })
        );
        // Python's json writes a diverged loss as a bare NaN or Infinity.
        let Ok(Line::Step { loss, .. }) = parse(r#"{"step": 3, "loss": NaN, "lr": 0.1}"#) else {
            panic!("a NaN loss reads")
        };
        assert!(loss.is_nan());
        assert!(matches!(
            parse(r#"{"step": 3, "loss": -Infinity, "lr": 0.1}"#),
            Ok(Line::Step { loss, .. }) if loss == f64::NEG_INFINITY
        ));
        assert!(
            parse(r#"{"step": 3, "loss": "NaN", "lr": 0.1}"#).is_ok(),
            "the quoted form reads too"
        );
        for (bad, says) in [
            (r#"{"epoch": 1, "acc": NaN}"#, "is not a fraction"),
            ("loss 2.5", "not a JSON object"),
            ("[1, 2]", "not a JSON object"),
            (r#"{"step": 1, "lr": 0.1}"#, "no `loss`"),
            (
                r#"{"step": -1, "loss": 1, "lr": 0.1}"#,
                "`step` is not a whole number",
            ),
            (
                r#"{"epoch": 1, "acc": 94.1}"#,
                "looks like a percentage: send a fraction (0.941)",
            ),
            (r#"{"final": {"acc": "high"}}"#, "`acc` is not a number"),
            (
                r#"{"loss": 1}"#,
                "neither `step`, `epoch`, `final` nor `tricklab`",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_growing_file_is_read_a_complete_line_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut tail = Tail::new(&path);
        assert!(
            tail.read().unwrap().lines.is_empty(),
            "no file yet: nothing"
        );
        let append = |s: &str| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(s.as_bytes()).unwrap();
        };
        append("{\"tricklab\": 1}\n{\"step\": 1, \"loss\": 2.0, \"lr\"");
        let Read { lines, warnings } = tail.read().unwrap();
        assert_eq!(
            lines,
            vec![(
                1,
                Line::Version {
                    version: 1,
                    steps: None,
                    epochs: None
                }
            )]
        );
        assert!(warnings.is_empty());
        append(": 0.1}\nnot json\n\n{\"final\": {\"acc\": 0.5}}\n");
        let Read { lines, warnings } = tail.read().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(matches!(lines[0], (2, Line::Step { step: 1, .. })));
        assert!(matches!(lines[1], (5, Line::Final { .. })));
        assert_eq!(tail.malformed, 1);
        assert!(
            warnings[0].starts_with(&format!("{}:3: not a JSON object", path.display())),
            "{warnings:?}"
        );
    }

    /// The Python module in python/ writes what this reads: a CPU run's
    /// steps (with a real BatchNorm's scale), epochs on its clock, and the
    /// final line, after the version; outside tricklab it writes nothing.
    #[test]
    fn the_python_module_writes_the_protocol() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = std::env::var_os("TRICKLAB_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join(".venv/bin/python3"));
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("events.jsonl");
        // With torch (the project's .venv), a real BatchNorm's scale and a
        // tensor loss; where the Python has none (`make test LIBTORCH=…`),
        // the same numbers as plain floats: the module needs no torch.
        let script = r#"
import time, tricklab
try:
    import torch
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    with torch.no_grad():
        model[1].weight.fill_(0.5)
    scale, loss = (lambda: tricklab.bn_scale(model)), (lambda e: torch.tensor(2.0 - e))
except ImportError:
    scale, loss = (lambda: 0.5), (lambda e: 2.0 - e)
tricklab.start(steps=2, epochs=2)
clock = tricklab.Clock()
for e in range(2):
    with clock:
        time.sleep(0.05)
        tricklab.log(step=e + 1, loss=loss(e), lr=0.1, bn_scale=scale(), images=64 * (e + 1))
    time.sleep(0.05)
    tricklab.epoch(epoch=e + 1, acc=0.25 * (e + 1), seconds=clock.seconds())
tricklab.final(acc=0.5, seconds=clock.seconds())
"#;
        let run = |env: Option<&Path>| {
            let mut c = std::process::Command::new(&python);
            c.args(["-c", script])
                .env("PYTHONPATH", repo.join("python"));
            match env {
                Some(p) => c.env("TRICKLAB_EVENTS", p),
                None => c.env_remove("TRICKLAB_EVENTS"),
            };
            let o = c
                .output()
                .expect("the project's Python (make test installs it)");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        run(None);
        assert!(
            !events.exists(),
            "outside tricklab the module writes nothing"
        );
        run(Some(&events));
        let Read { lines, warnings } = Tail::new(&events).read().unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let lines: Vec<Line> = lines.into_iter().map(|l| l.1).collect();
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert_eq!(
            lines[0],
            Line::Version {
                version: VERSION,
                steps: Some(2),
                epochs: Some(2.0)
            }
        );
        assert_eq!(
            lines[1],
            Line::Step {
                step: 1,
                loss: 2.0,
                lr: 0.1,
                bn_scale: Some(0.5),
                images: Some(64)
            }
        );
        // The clock counts the 2 × 50 ms inside it, not the 50 ms outside.
        let Line::Final {
            acc,
            seconds: Some(s),
        } = lines[5]
        else {
            panic!("{lines:?}")
        };
        assert_eq!(acc, 0.5);
        assert!((0.1..0.15).contains(&s), "{s} s on the clock");
        assert!(matches!(lines[4], Line::Epoch { epoch: 2, acc, .. } if acc == 0.5));
    }
}
