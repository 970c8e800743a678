//! Plain data at the bottom of the crate: what a queued run is before it is
//! resolved (a recipe name plus overrides), the run's identity, the resolved
//! settings and trick states as the manifest records them, and DDP's options
//! and measured times (the plan's `step.ddp`, a run's summary), which the
//! process group (`dist::group`, above this) takes and reports. Shared by the
//! CLI (`--trick`, `--set`), the matrix files, the queue, the catalog and the
//! recipes. No behaviour: resolution lives in `recipe`, effects in `tricks`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Identifies one run of a matrix: `variant` and `repeat` are unique together
/// within a matrix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RunId {
    pub matrix: String,
    /// Position of the variant in its matrix: the rung number of a ladder.
    pub index: usize,
    pub variant: String,
    pub repeat: usize,
}

impl RunId {
    /// A stable key usable in file names, `variant#repeat`, readable as the
    /// variant is named (`B0 baseline (CPU loader)#0`): only what a file name
    /// cannot hold or would hide is written `%XX` (`/`, `\\`, control
    /// characters, a leading `.`), and `%` itself, so distinct variants never
    /// share a file (`a b` and `a_b` once did).
    pub fn key(&self) -> String {
        let mut v = String::with_capacity(self.variant.len());
        for (i, c) in self.variant.chars().enumerate() {
            if matches!(c, '/' | '\\' | '%') || c.is_control() || (i == 0 && c == '.') {
                let mut b = [0; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    v.push_str(&format!("%{byte:02X}"));
                }
            } else {
                v.push(c);
            }
        }
        format!("{v}#{}", self.repeat)
    }

    /// The key of folders written before [`key`](Self::key) kept names
    /// readable: every byte but letters, digits and `-_.+` written `%XX`
    /// (readers fall back to it).
    pub fn escaped_key(&self) -> String {
        let mut v = String::with_capacity(self.variant.len());
        for b in self.variant.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.+".contains(&b) {
                v.push(b as char);
            } else {
                v.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{v}#{}", self.repeat)
    }

    /// The key folders written before `key` encoded were named by: unsafe
    /// characters replaced by `_` (readers fall back to it).
    pub fn legacy_key(&self) -> String {
        let v: String = self
            .variant
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.+".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{v}#{}", self.repeat)
    }
}

/// The longest variant name: a table column, a chart label and a file name.
pub const MAX_VARIANT_NAME: usize = 100;
/// The longest matrix name: it names the results folder.
pub const MAX_MATRIX_NAME: usize = 64;

/// A matrix name names a results folder and goes into Slurm scripts: ASCII
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit, at most
/// [`MAX_MATRIX_NAME`] characters.
pub fn check_matrix_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || name.len() > MAX_MATRIX_NAME {
        return Err(format!(
            "matrix name `{}` must have 1 to {MAX_MATRIX_NAME} characters",
            name.escape_debug()
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) || !name.chars().all(ok_char) {
        return Err(format!(
            "matrix name `{}`: use ASCII letters, digits, '-', '_' and '.', starting with a letter or digit (it names the results folder)",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// A variant name is a table row, a chart label and (encoded) a file name:
/// letters, digits, spaces and `+-_.,:;=()[]%#'&*!?<>~^@` , no path separator
/// (`/`, `\`), no control character, not `.` or `..`, no leading or trailing
/// space, at most [`MAX_VARIANT_NAME`] characters.
pub fn check_variant_name(name: &str) -> Result<(), String> {
    let shown = name.escape_debug().to_string();
    let count = name.chars().count();
    if count == 0 || count > MAX_VARIANT_NAME {
        let start: String = name.chars().take(24).collect();
        return Err(format!(
            "variant name `{}{}` has {count} characters: give it 1 to {MAX_VARIANT_NAME}",
            start.escape_debug(),
            if count > 24 { "…" } else { "" }
        ));
    }
    if name == "." || name == ".." || name.trim() != name {
        return Err(format!(
            "variant name `{shown}`: no leading or trailing spaces, and not `.` or `..`"
        ));
    }
    let ok = |c: char| c.is_alphanumeric() || c == ' ' || "+-_.,:;=()[]%#'&*!?<>~^@".contains(c);
    if let Some(bad) = name.chars().find(|c| !ok(*c)) {
        return Err(format!(
            "variant name `{shown}`: `{}` is not allowed (letters, digits, spaces and +-_.,:;=()[]%#'&*!?<>~^@; no `/`, `\\` or control characters)",
            bad.escape_debug()
        ));
    }
    Ok(())
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}#{}", self.matrix, self.variant, self.repeat)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    /// Page's DAWN pre-activation ResNet-18 variant (P1–P3).
    PageResnet18,
    /// Page P4a: the ResNet-18's shortest path (1×1 stride-2 shortcut convs
    /// between repeated BN-ReLUs), concat max+avg head, linear with a bias.
    P4aPath,
    /// P4b: no repeated BN-ReLU; downsampling 1×1 stride-2 conv → BN → ReLU.
    P4bConv1x1,
    /// P4c: 3×3 stride-2 downsampling convs.
    P4cConv3x3,
    /// P4d: 3×3 conv → BN → ReLU → max-pool 2, still the concat head, 256 wide.
    P4dMaxpool,
    /// P4e: global max-pool head and the last width doubled to 512.
    P4eMaxHead,
    /// Page part-4 plain net 64/128/256/512, max-pool downsampling (P4f).
    Backbone,
    /// Page's ResNet-9: the backbone with residuals on layers 1 and 3.
    Resnet9,
    /// airbench94's 3-ConvGroup net without residuals.
    Airbench,
    /// hlb-CIFAR10 v0.7: the same body, 64/256/512 wide.
    Hlb,
    /// torchvision's ResNet-18 (basic blocks, 7x7 stem, average-pool head).
    TvResnet18,
    /// torchvision's ResNet-50 (bottlenecks, stride on the 3x3 conv).
    TvResnet50,
}

impl Arch {
    /// Every architecture by its setting name (`arch = "..."`).
    pub const NAMED: &[(&str, Arch)] = &[
        ("page-resnet18", Arch::PageResnet18),
        ("p4a-path", Arch::P4aPath),
        ("p4b-conv1x1", Arch::P4bConv1x1),
        ("p4c-conv3x3", Arch::P4cConv3x3),
        ("p4d-maxpool", Arch::P4dMaxpool),
        ("p4e-maxhead", Arch::P4eMaxHead),
        ("backbone", Arch::Backbone),
        ("resnet9", Arch::Resnet9),
        ("airbench", Arch::Airbench),
        ("hlb", Arch::Hlb),
        ("torchvision-resnet18", Arch::TvResnet18),
        ("torchvision-resnet50", Arch::TvResnet50),
    ];

    /// airbench's and hlb's whitened ConvGroup nets.
    pub fn conv_groups(self) -> bool {
        matches!(self, Arch::Airbench | Arch::Hlb)
    }

    /// torchvision's ImageNet ResNets: 7x7 stem, residual stages, average pool.
    pub fn torchvision(self) -> bool {
        matches!(self, Arch::TvResnet18 | Arch::TvResnet50)
    }

    pub fn parse(name: &str) -> Option<Arch> {
        let name = if name == "resnet18" {
            "page-resnet18"
        } else {
            name
        };
        Self::NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, a)| a)
    }

    /// As settings and matrix files spell it.
    pub fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("unknown", |(n, _)| n)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Page's Nesterov form: lr inside the momentum buffer.
    SgdPage,
    /// PyTorch's SGD form (airbench, hlb).
    SgdTorch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// [0, peak_epoch*E, E] -> [0, 1, final_lr_frac]: Page's triangle.
    Page,
    /// Page part 1-3: [0, 15, 30, 35]/35 -> [0, 1, 0.05, 0].
    Dawn,
    /// airbench: 0.2 -> 1 over the first peak_epoch, then linear to final_lr_frac.
    Airbench,
    /// hlb OneCycle: 0 -> 1 at peak_epoch, then to final_lr_frac.
    Onecycle,
    /// FFCV: [0, peak_epoch*E, E] -> [1e-4, 1, final_lr_frac], read at each
    /// step's fractional epoch.
    Cyclic,
    /// 1 -> 0 linearly (airbench94_muon).
    Linear,
    Constant,
}

/// A timing convention (TRICKS.md section 5): what a published time covers.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// DAWNBench, as Page times it: preprocessing, whitening and training; no eval.
    #[default]
    Dawn,
    /// airbench: whitening, training and the final (TTA) evaluation.
    Airbench,
    /// hlb: the training loop of each epoch only.
    Hlb,
    /// Everything, start to summary.
    Wall,
}

/// A stage of a run as the clocks see it (TRICKS.md section 5), named as
/// the golden trajectories record the references' own timed regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Moving the data set to the device.
    Loading,
    /// Building and initialising the net (airbench and hlb before their
    /// timers, Page's new_dawn.py inside its).
    NetBuild,
    /// The whitening basis from the training images.
    Whitening,
    /// Normalising, flipping and padding the resident set (airbench's
    /// loader does it in its first epoch, inside the timer).
    Preprocessing,
    /// The training loop of each epoch.
    Training,
    /// The evaluations between epochs.
    EpochEvaluation,
    /// The final (TTA) evaluation.
    FinalEvaluation,
}

impl Stage {
    /// As a golden trajectory names it.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Loading => "loading",
            Stage::NetBuild => "net build",
            Stage::Whitening => "whitening",
            Stage::Preprocessing => "preprocessing",
            Stage::Training => "training",
            Stage::EpochEvaluation => "per-epoch evaluation",
            Stage::FinalEvaluation => "final evaluation",
        }
    }
}

impl Clock {
    pub const ALL: [Clock; 4] = [Clock::Dawn, Clock::Airbench, Clock::Hlb, Clock::Wall];

    /// The stages this clock's seconds cover: the one place each convention
    /// is written down (`None`: the wall clock, everything start to summary).
    pub fn stages(self) -> Option<&'static [Stage]> {
        match self {
            Clock::Dawn => Some(&[
                Stage::Loading,
                Stage::Preprocessing,
                Stage::Whitening,
                Stage::NetBuild,
                Stage::Training,
            ]),
            Clock::Airbench => Some(&[
                Stage::Preprocessing,
                Stage::Whitening,
                Stage::Training,
                Stage::FinalEvaluation,
            ]),
            Clock::Hlb => Some(&[Stage::Training]),
            Clock::Wall => None,
        }
    }

    /// The seconds this clock counts, given each stage's own: the one sum
    /// of a convention's stages, which the engine's time to target and the
    /// report's curves both read. `None`: the wall clock, which counts
    /// everything start to summary rather than stages.
    pub fn sum(self, seconds: impl Fn(Stage) -> f64) -> Option<f64> {
        self.stages().map(|st| st.iter().map(|s| seconds(*s)).sum())
    }

    pub fn name(self) -> &'static str {
        match self {
            Clock::Dawn => "dawn",
            Clock::Airbench => "airbench",
            Clock::Hlb => "hlb",
            Clock::Wall => "wall",
        }
    }

    pub fn parse(name: &str) -> Option<Clock> {
        Clock::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The column of the run table holding this clock's seconds.
    pub fn column(self) -> &'static str {
        match self {
            Clock::Dawn => "dawn_s",
            Clock::Airbench => "airbench_s",
            Clock::Hlb => "hlb_s",
            Clock::Wall => "wall_s",
        }
    }

    /// How a table names it.
    pub fn label(self) -> &'static str {
        match self {
            Clock::Dawn => "DAWNBench clock",
            Clock::Airbench => "airbench clock",
            Clock::Hlb => "hlb clock",
            Clock::Wall => "wall clock",
        }
    }
}

/// A trick parameter's resolved value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Num(f64),
    Text(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrickState {
    pub on: bool,
    pub params: BTreeMap<String, Value>,
}

/// A run's settings and trick states, fully resolved: what the manifest
/// records. The engine never reads it: the catalog turns it into a `RunPlan`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub recipe: String,
    /// The timing convention of the recipe's publication (older manifests: dawn).
    #[serde(default)]
    pub clock: Clock,
    pub arch: Arch,
    pub width_mult: f64,
    pub epochs: f64,
    pub batch_size: usize,
    /// Peak learning rate, mean-loss convention (TRICKS.md interaction 7).
    pub lr: f64,
    pub momentum: f64,
    /// Coupled: the per-step decay is lr * weight_decay.
    pub weight_decay: f64,
    /// The batch `lr` is written at, for references that sum their loss
    /// with a per-example lr (airbench: "per 1024 examples"), so that their
    /// step grows with the batch: lr × batch_size / lr_batch. 0: per batch.
    #[serde(default)]
    pub lr_batch: usize,
    /// The same for the per-step weight decay (hlb's grows with the batch
    /// where its gradient step does not). 0: per batch.
    #[serde(default)]
    pub wd_batch: usize,
    pub optimizer: OptimizerKind,
    pub schedule: ScheduleKind,
    /// Fraction of the epochs at which the schedule peaks.
    pub peak_epoch: f64,
    pub final_lr_frac: f64,
    /// Images per class kept from the data set (0 = all).
    pub train_per_class: usize,
    pub test_per_class: usize,
    pub eval_every: usize,
    /// Test images per evaluation forward pass (older manifests: 500).
    #[serde(default = "default_eval_batch")]
    pub eval_batch: usize,
    /// Steps between device read-backs of the step metrics.
    pub metrics_every: usize,
    /// Ranks (processes, one device each) the run is spread over.
    #[serde(default = "one")]
    pub world_size: usize,
    pub tricks: BTreeMap<String, TrickState>,
    /// The overrides as written, in order.
    pub overrides: Vec<String>,
}

fn one() -> usize {
    1
}

fn default_eval_batch() -> usize {
    500
}

impl RunConfig {
    pub fn tricks_on(&self) -> Vec<String> {
        self.tricks
            .iter()
            .filter(|(_, t)| t.on)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// JSON for events and the manifest, with the fields every consumer relies on.
    pub fn to_json(&self, seed: u64, data_name: &str, data_hash: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("tricks_on".into(), serde_json::json!(self.tricks_on()));
            o.insert("seed".into(), serde_json::json!(seed));
            o.insert("data_name".into(), serde_json::json!(data_name));
            o.insert("data_hash".into(), serde_json::json!(data_hash));
        }
        v
    }
}

/// A number, or arithmetic on numbers (`+ - * /`, parentheses), so that a
/// recipe can state a value the way its source computes it, e.g.
/// `0.0153 / (1 + 1/(1 - 0.85)) / 1.5`, and keep every digit.
#[allow(
    clippy::too_many_lines,
    reason = "a small recursive-descent parser kept in one piece"
)]
pub fn arithmetic(text: &str) -> std::result::Result<f64, String> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn peek(&mut self) -> Option<u8> {
            while self.s.get(self.i) == Some(&b' ') {
                self.i += 1;
            }
            self.s.get(self.i).copied()
        }
        fn sum(&mut self) -> std::result::Result<f64, String> {
            let mut v = self.product()?;
            while let Some(op @ (b'+' | b'-')) = self.peek() {
                self.i += 1;
                let r = self.product()?;
                v = if op == b'+' { v + r } else { v - r };
            }
            Ok(v)
        }
        fn product(&mut self) -> std::result::Result<f64, String> {
            let mut v = self.unary()?;
            while let Some(op @ (b'*' | b'/')) = self.peek() {
                self.i += 1;
                let r = self.unary()?;
                v = if op == b'*' { v * r } else { v / r };
            }
            Ok(v)
        }
        fn unary(&mut self) -> std::result::Result<f64, String> {
            match self.peek() {
                Some(b'-') => {
                    self.i += 1;
                    Ok(-self.unary()?)
                }
                Some(b'(') => {
                    self.i += 1;
                    let v = self.sum()?;
                    if self.peek() != Some(b')') {
                        return Err("a `(` is not closed".into());
                    }
                    self.i += 1;
                    Ok(v)
                }
                _ => self.number(),
            }
        }
        fn number(&mut self) -> std::result::Result<f64, String> {
            let start = self.i;
            while let Some(&c) = self.s.get(self.i) {
                let exponent_sign = (c == b'+' || c == b'-')
                    && self.i > start
                    && matches!(self.s[self.i - 1], b'e' | b'E');
                if c.is_ascii_alphanumeric() || c == b'.' || exponent_sign {
                    self.i += 1;
                } else {
                    break;
                }
            }
            let word = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            match word.parse::<f64>() {
                Ok(v) if !word.is_empty() => Ok(v),
                _ if word.is_empty() => {
                    Err(format!("expected a number at character {}", start + 1))
                }
                _ => Err(format!("`{word}` is not a number")),
            }
        }
    }
    let mut p = P {
        s: text.trim().as_bytes(),
        i: 0,
    };
    let v = p.sum()?;
    match p.peek() {
        None => Ok(v),
        Some(c) => Err(format!(
            "unexpected `{}` at character {}",
            c as char,
            p.i + 1
        )),
    }
}

/// A run setting that `--set KEY=VALUE` (or a matrix's `set = { KEY = ... }`)
/// changes: its key, its help, and how a value enters the configuration,
/// parsed and checked. One table, as the tricks have theirs: the recipe
/// resolver, `tricklab recipes`, the trick catalog's rows for settings and
/// the recipes' completeness test all read it.
pub struct Setting {
    pub key: &'static str,
    pub help: &'static str,
    /// Sets the value (`--set` text: a number may be arithmetic) of the
    /// setting named by the first argument, or says in one line why not.
    pub set: fn(&mut RunConfig, &str, &str) -> anyhow::Result<()>,
}

/// Every run setting, in the order `recipe show` and the help list them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "arch",
        help: "page-resnet18 | backbone | resnet9 | airbench",
        set: |c, k, v| {
            c.arch = Arch::parse(v).ok_or_else(|| {
                let names: Vec<&str> = Arch::NAMED.iter().map(|(n, _)| *n).collect();
                anyhow::anyhow!("`{k}={v}`: expected one of {}", names.join(", "))
            })?;
            Ok(())
        },
    },
    Setting {
        key: "width_mult",
        help: "width multiplier of every layer",
        set: |c, k, v| {
            c.width_mult = positive(k, v)?;
            Ok(())
        },
    },
    Setting {
        key: "epochs",
        help: "training epochs (fractional allowed); `epochs * 8 / 7.59` scales the value before this change",
        set: |c, k, v| {
            // The value may name the setting itself, read as its value
            // before this change: a variant that scales the length keeps
            // its proportion at whatever length the session runs (a record
            // retuned from 7.59 to 8 epochs runs 1.054 under `--set
            // epochs=1`, as the script's own take-back scales it).
            let relative = v.replace("epochs", &format!("({:?})", c.epochs));
            c.epochs = positive(k, &relative)?;
            Ok(())
        },
    },
    Setting {
        key: "batch_size",
        help: "images per step; scale lr with it (Page: linearly, in mean-loss units)",
        set: |c, k, v| {
            c.batch_size = count(k, v, 1)?;
            Ok(())
        },
    },
    Setting {
        key: "lr",
        help: "peak learning rate, mean-loss convention",
        set: |c, k, v| {
            c.lr = positive(k, v)?;
            Ok(())
        },
    },
    Setting {
        key: "momentum",
        help: "optimiser momentum",
        set: |c, k, v| {
            c.momentum = number(k, v)?;
            if !(0.0..1.0).contains(&c.momentum) {
                anyhow::bail!("`{k}={v}`: must be in [0, 1)");
            }
            Ok(())
        },
    },
    Setting {
        key: "weight_decay",
        help: "coupled weight decay (per-step decay lr*wd)",
        set: |c, k, v| {
            c.weight_decay = number(k, v)?;
            if c.weight_decay < 0.0 {
                anyhow::bail!("`{k}={v}`: must be ≥ 0");
            }
            Ok(())
        },
    },
    Setting {
        key: "lr_batch",
        help: "the batch lr is written at: the step scales by batch_size/lr_batch, as in scripts with a per-example lr (0 = per batch)",
        set: |c, k, v| {
            c.lr_batch = count(k, v, 0)?;
            Ok(())
        },
    },
    Setting {
        key: "wd_batch",
        help: "the batch the per-step decay is written at: it scales by batch_size/wd_batch (0 = per batch)",
        set: |c, k, v| {
            c.wd_batch = count(k, v, 0)?;
            Ok(())
        },
    },
    Setting {
        key: "optimizer",
        help: "sgd_page | sgd_torch (lars/lamb/adamw/muon are tricks)",
        set: |c, k, v| {
            c.optimizer = match v {
                "sgd_page" => OptimizerKind::SgdPage,
                "sgd_torch" => OptimizerKind::SgdTorch,
                _ => anyhow::bail!("`{k}={v}`: expected sgd_page or sgd_torch"),
            };
            Ok(())
        },
    },
    Setting {
        key: "schedule",
        help: "page | dawn | airbench | onecycle | cyclic | linear | constant",
        set: |c, k, v| {
            c.schedule = match v {
                "page" => ScheduleKind::Page,
                "dawn" => ScheduleKind::Dawn,
                "airbench" => ScheduleKind::Airbench,
                "onecycle" => ScheduleKind::Onecycle,
                "cyclic" => ScheduleKind::Cyclic,
                "linear" => ScheduleKind::Linear,
                "constant" => ScheduleKind::Constant,
                _ => anyhow::bail!(
                    "`{k}={v}`: expected page, dawn, airbench, onecycle, cyclic, linear or constant"
                ),
            };
            Ok(())
        },
    },
    Setting {
        key: "peak_epoch",
        help: "fraction of the epochs at the schedule's peak",
        set: |c, k, v| {
            c.peak_epoch = fraction(k, v)?;
            Ok(())
        },
    },
    Setting {
        key: "final_lr_frac",
        help: "schedule value at the end, as a fraction of the peak",
        set: |c, k, v| {
            c.final_lr_frac = fraction(k, v)?;
            Ok(())
        },
    },
    Setting {
        key: "train_per_class",
        help: "training images kept per class (0 = all)",
        set: |c, k, v| {
            c.train_per_class = count(k, v, 0)?;
            Ok(())
        },
    },
    Setting {
        key: "test_per_class",
        help: "test images kept per class (0 = all)",
        set: |c, k, v| {
            c.test_per_class = count(k, v, 0)?;
            Ok(())
        },
    },
    Setting {
        key: "eval_every",
        help: "evaluate every N epochs (the last epoch always)",
        set: |c, k, v| {
            c.eval_every = count(k, v, 1)?;
            Ok(())
        },
    },
    Setting {
        key: "eval_batch",
        help: "test images per evaluation forward pass",
        set: |c, k, v| {
            c.eval_batch = count(k, v, 1)?;
            Ok(())
        },
    },
    Setting {
        key: "metrics_every",
        help: "steps between device read-backs of step metrics (0: once per epoch)",
        set: |c, k, v| {
            c.metrics_every = count(k, v, 0)?;
            Ok(())
        },
    },
    Setting {
        key: "world_size",
        help: "ranks (processes, one device each) one run is spread over; the batch is the global batch",
        set: |c, k, v| {
            c.world_size = count(k, v, 1)?;
            Ok(())
        },
    },
];

/// The setting named `key`.
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

/// A setting's (or a trick parameter's) number: a value or arithmetic on
/// values, finite.
pub fn number(key: &str, value: &str) -> anyhow::Result<f64> {
    let v = arithmetic(value)
        .map_err(|why| anyhow::anyhow!("`{key}={value}`: `{value}` is not a number ({why})"))?;
    if !v.is_finite() {
        anyhow::bail!("`{key}={value}`: not a finite number");
    }
    Ok(v)
}

fn positive(key: &str, value: &str) -> anyhow::Result<f64> {
    let v = number(key, value)?;
    if v <= 0.0 {
        anyhow::bail!("`{key}={value}`: must be > 0");
    }
    Ok(v)
}

/// A whole number of at least `min` (0 or 1).
fn count(key: &str, value: &str, min: usize) -> anyhow::Result<usize> {
    let v = if min > 0 {
        positive(key, value)?
    } else {
        number(key, value)?
    };
    if v < 0.0 || v.fract() != 0.0 {
        anyhow::bail!("`{key}={value}`: must be a whole number ≥ 0");
    }
    Ok(v as usize)
}

fn fraction(key: &str, value: &str) -> anyhow::Result<f64> {
    let v = number(key, value)?;
    if !(0.0..=1.0).contains(&v) {
        anyhow::bail!("`{key}={value}`: must be in [0, 1]");
    }
    Ok(v)
}

/// One change to a base recipe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Override {
    /// Turn a trick on or off (its parameters take their defaults unless `Set` follows).
    Trick { key: String, on: bool },
    /// Set a hyperparameter (`epochs`, `batch_size`, `lr`, …) or a trick parameter
    /// (`label_smoothing.alpha`). The value is parsed against the parameter's type.
    Set { key: String, value: String },
}

impl Override {
    /// A TOML value as the text `Set` takes (`--set` syntax): strings bare,
    /// numbers and booleans as written. Matrices and recipes.toml share it.
    pub fn toml_text(v: &toml::Value) -> String {
        match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// Parses the `--trick` syntax: `NAME`, `NAME=on` or `NAME=off`.
    pub fn parse_trick(s: &str) -> Result<Override, String> {
        let (key, state) = match s.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (s.trim(), "on"),
        };
        let on = match state {
            "on" | "true" | "1" => true,
            "off" | "false" | "0" => false,
            other => {
                return Err(format!(
                    "`{s}`: trick state must be on or off, not `{other}`"
                ));
            }
        };
        if key.is_empty() {
            return Err(format!("`{s}`: missing trick name"));
        }
        Ok(Override::Trick {
            key: key.to_string(),
            on,
        })
    }

    /// An override from its written form (`celu=on`, `lr=0.2`), as
    /// `Display` writes it; `None` for text without `=`.
    pub fn parse_word(s: &str) -> Option<Override> {
        let (k, v) = s.split_once('=')?;
        match v {
            "on" | "off" => Override::parse_trick(s).ok(),
            _ => Override::parse_set(&format!("{k}={v}")).ok(),
        }
    }

    /// Parses the `--set` syntax: `KEY=VALUE`.
    pub fn parse_set(s: &str) -> Result<Override, String> {
        match s.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => Ok(Override::Set {
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            }),
            _ => Err(format!("`{s}`: expected KEY=VALUE, for example epochs=10")),
        }
    }
}

impl std::fmt::Display for Override {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Override::Trick { key, on } => write!(f, "{key}={}", if *on { "on" } else { "off" }),
            Override::Set { key, value } => write!(f, "{key}={value}"),
        }
    }
}

/// The variant a run is read against while it trains: a ladder's previous
/// rung, or the reference variant of an add-one (`base`) or leave-one-out
/// (`all`) matrix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// Its position in the matrix.
    pub index: usize,
    /// What it is, for a legend: `previous rung`, `base`, `all on`.
    pub role: String,
}

/// One run as the queue holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub id: RunId,
    pub seed: u64,
    pub recipe: String,
    /// Applied in order on top of the recipe.
    pub overrides: Vec<Override>,
    /// Data set spec (`embedded`, an imported name, a folder or archive path).
    pub data: String,
    /// Target accuracy in [0, 1].
    pub target_acc: f64,
    /// Requested device (`cpu`, `cuda`, `cuda:1`); `None` means the worker's own.
    pub device: Option<String>,
    #[serde(default)]
    pub reference: Option<Reference>,
}

/// DDP's default bucket size (`bucket_cap_mb` = 25), also the size of the
/// flat buckets a broadcast travels in.
pub const BUCKET_BYTES: usize = 25 << 20;

/// How DDP's buckets travel (`ddp.hook`): DDP's default all-reduce, or its
/// fp16 or bf16 compression hook (the large-batch era's fp16 all-reduce).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CommHook {
    #[default]
    AllReduce,
    Fp16,
    Bf16,
}

/// DistributedDataParallel's bucket settings: its `bucket_cap_mb` (25)
/// and first bucket (1 MiB, `dist._DEFAULT_FIRST_BUCKET_BYTES`), and
/// `gradient_as_bucket_view`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DdpOptions {
    pub first_bucket_bytes: usize,
    pub bucket_bytes: usize,
    pub gradient_as_bucket_view: bool,
    pub hook: CommHook,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            first_bucket_bytes: 1 << 20,
            bucket_bytes: BUCKET_BYTES,
            gradient_as_bucket_view: true,
            hook: CommHook::AllReduce,
        }
    }
}

/// Where a step's gradient all-reduce went, by DDP's own clock (its
/// Logger's averages over the sampled steps): the backward's compute, the
/// all-reduce from its first bucket to its last, and the part of that
/// which ran while the backward still computed. The rest was exposed: the
/// step waited for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DdpTimes {
    pub backward_s: f64,
    pub allreduce_s: f64,
    pub hidden_s: f64,
}

impl DdpTimes {
    pub fn exposed_s(&self) -> f64 {
        (self.allreduce_s - self.hidden_s).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_variants_never_share_a_file_key() {
        let id = |v: &str| RunId {
            matrix: "m".into(),
            index: 0,
            variant: v.into(),
            repeat: 1,
        };
        let names = [
            "a b",
            "a_b",
            "a/b",
            "a%2Fb",
            "a%20b",
            ".x",
            "%2Ex",
            "+ label smoothing",
            "P4f x0.125",
        ];
        let keys: std::collections::HashSet<String> = names.iter().map(|n| id(n).key()).collect();
        assert_eq!(keys.len(), names.len(), "{keys:?}");
        assert_eq!(id("a b").key(), "a b#1");
        assert_eq!(id("a b").escaped_key(), "a%20b#1");
        assert_eq!(id("a b").legacy_key(), "a_b#1");
        assert_eq!(
            id("B0 baseline (CPU loader)").key(),
            "B0 baseline (CPU loader)#1"
        );
        assert_eq!(id("a/b").key(), "a%2Fb#1");
        assert_eq!(id("a%2Fb").key(), "a%252Fb#1");
        assert_eq!(id(".hidden").key(), "%2Ehidden#1");
        for k in &keys {
            assert!(!k.contains(['/', '\\']) && !k.starts_with('.'), "{k}");
        }
        assert!(check_variant_name("R1 + SiLU (GELU kept), 94.0%").is_ok());
        assert!(check_matrix_name("speedrun-ladder").is_ok());
        assert!(check_matrix_name(".hidden").is_err());
    }

    #[test]
    fn parses_trick_and_set_syntax() {
        assert_eq!(
            Override::parse_trick("celu").unwrap(),
            Override::Trick {
                key: "celu".into(),
                on: true
            }
        );
        assert_eq!(
            Override::parse_trick("ema=off").unwrap(),
            Override::Trick {
                key: "ema".into(),
                on: false
            }
        );
        assert!(
            Override::parse_trick("ema=maybe")
                .unwrap_err()
                .contains("on or off")
        );
        assert_eq!(
            Override::parse_set("epochs=10").unwrap(),
            Override::Set {
                key: "epochs".into(),
                value: "10".into()
            }
        );
        assert!(Override::parse_set("epochs").is_err());
    }
}
