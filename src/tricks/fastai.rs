//! fast.ai's ImageNet phases (the DAWNBench entry of 2018, "ImageNet in 18
//! minutes": cybertronai/imagenet18, `train.py` at 25dad42, the lists
//! `one_machine`, `four_machines`, `eight_machines`, `sixteen_machines`),
//! as that repository's `train_imagenet_nv.py` reads them: a data phase
//! (`bs` in it) starts at its epoch and sets the image side, the per-GPU
//! batch and the crop's smallest scale, or with `keep_dl` only the batch; an
//! lr phase (`lr` in it) is constant from its epoch, or with two values a
//! linear ramp over its epochs, the last phase starting at or before the
//! current epoch being in force (`Scheduler.get_current_phase`). The run
//! lasts to the largest epoch an lr phase names (`tot_epochs`).
//!
//! Each machine has 8 GPUs (`--nproc_per_node=8`): the global batch is the
//! per-GPU `bs` × 8 × machines. The lr values are written as the source's
//! expressions, in multiples of its `lr` (the recipe's `lr` setting).

use crate::plan::{LrPhase, StreamPhase};

/// A data phase: from epoch `ep`, `sz` px crops at `bs` images a GPU.
struct Data {
    ep: usize,
    /// None: `keep_dl`, the batch changes and the rest stays.
    sz: Option<usize>,
    bs: usize,
    min_scale: f64,
    rect_val: bool,
}

/// torchvision's RandomResizedCrop default (`scale=(0.08, 1.0)`), where a
/// phase names no `min_scale`.
const MIN_SCALE: f64 = 0.08;

const fn data(ep: usize, sz: usize, bs: usize) -> Data {
    Data {
        ep,
        sz: Some(sz),
        bs,
        min_scale: MIN_SCALE,
        rect_val: false,
    }
}

const fn keep_dl(ep: usize, bs: usize) -> Data {
    Data {
        ep,
        sz: None,
        bs,
        min_scale: MIN_SCALE,
        rect_val: false,
    }
}

/// An lr phase: from epoch `ep` (to `to` for a ramp), in multiples of `lr`.
struct Lr {
    ep: f64,
    to: Option<f64>,
    start: f64,
    end: f64,
}

const fn flat(ep: f64, v: f64) -> Lr {
    Lr {
        ep,
        to: None,
        start: v,
        end: v,
    }
}

const fn ramp(ep: f64, to: f64, start: f64, end: f64) -> Lr {
    Lr {
        ep,
        to: Some(to),
        start,
        end,
    }
}

struct Schedule {
    machines: usize,
    /// The schedule's `lr`, which every value below multiplies.
    lr: f64,
    data: &'static [Data],
    lr_phases: &'static [Lr],
}

/// The four schedules of `train.py`, each comment its own ("time to 93%
/// top-5").
static SCHEDULES: &[Schedule] = &[
    // lr = 1.0; scale_224 = 224 / 512; scale_288 = 128 / 512
    Schedule {
        machines: 1,
        lr: 1.0,
        data: &[
            data(0, 128, 512),
            data(14, 224, 224),
            Data {
                min_scale: 0.5,
                rect_val: true,
                ..data(32, 288, 128)
            },
        ],
        lr_phases: &[
            ramp(0.0, 5.0, 1.0, 2.0),
            flat(5.0, 1.0),
            flat(14.0, 224.0 / 512.0),
            flat(16.0, 1.0 / 10.0 * (224.0 / 512.0)),
            flat(27.0, 1.0 / 100.0 * (224.0 / 512.0)),
            flat(32.0, 1.0 / 100.0 * (128.0 / 512.0)),
            // {'ep': (33, 35), 'lr': lr / 1000 * scale_288}: one value, constant.
            Lr {
                ep: 33.0,
                to: Some(35.0),
                start: 1.0 / 1000.0 * (128.0 / 512.0),
                end: 1.0 / 1000.0 * (128.0 / 512.0),
            },
        ],
    },
    // "29:44 to 93.05": lr = 0.50 * 4; bs = [256, 224, 128]; bs_scale = bs / 256
    Schedule {
        machines: 4,
        lr: 0.50 * 4.0,
        data: &[
            data(0, 128, 256),
            keep_dl(6, 256 * 2),
            Data {
                min_scale: 0.087,
                ..data(13, 224, 224)
            },
            Data {
                min_scale: 0.5,
                rect_val: true,
                ..data(28, 288, 128)
            },
        ],
        lr_phases: &[
            ramp(0.0, 6.0, 1.0, 2.0),
            flat(6.0, 2.0),
            ramp(11.0, 13.0, 2.0, 1.0),
            flat(13.0, 224.0 / 256.0),
            ramp(16.0, 23.0, 224.0 / 256.0, 1.0 / 10.0 * (224.0 / 256.0)),
            ramp(
                23.0,
                28.0,
                1.0 / 10.0 * (224.0 / 256.0),
                1.0 / 100.0 * (224.0 / 256.0),
            ),
            ramp(
                28.0,
                30.0,
                1.0 / 100.0 * (128.0 / 256.0),
                1.0 / 1000.0 * (128.0 / 256.0),
            ),
        ],
    },
    // "19:04 to 93.0": lr = 0.235 * 8; scale_224 = 224 / 128
    Schedule {
        machines: 8,
        lr: 0.235 * 8.0,
        data: &[
            data(0, 128, 128),
            keep_dl(6, 256),
            Data {
                min_scale: 0.087,
                ..data(14, 224, 128)
            },
            keep_dl(17, 224),
            Data {
                min_scale: 0.5,
                rect_val: true,
                ..data(29, 288, 128)
            },
        ],
        lr_phases: &[
            ramp(0.0, 6.0, 1.0, 2.0),
            flat(6.0, 2.0),
            ramp(11.0, 14.0, 2.0, 1.0),
            flat(14.0, 1.0),
            ramp(17.0, 23.0, 1.0, 1.0 / 10.0 * (224.0 / 128.0)),
            ramp(
                23.0,
                29.0,
                1.0 / 10.0 * (224.0 / 128.0),
                1.0 / 100.0 * (224.0 / 128.0),
            ),
            ramp(29.0, 35.0, 1.0 / 100.0, 1.0 / 1000.0),
        ],
    },
    // "16:08 to 93.04 (after prewarming)": lr = 0.235 * 8
    Schedule {
        machines: 16,
        lr: 0.235 * 8.0,
        data: &[
            data(0, 128, 64),
            keep_dl(6, 128),
            data(16, 224, 64),
            keep_dl(19, 192),
            Data {
                min_scale: 0.5,
                rect_val: true,
                ..data(37, 288, 128)
            },
        ],
        lr_phases: &[
            ramp(0.0, 6.0, 1.0, 2.0),
            flat(6.0, 2.0),
            flat(16.0, 1.0),
            flat(19.0, 2.0 / (10.0 / 1.5)),
            flat(31.0, 2.0 / (100.0 / 1.5)),
            flat(37.0, 2.0 / 100.0),
            // {'ep': (38, 50), 'lr': 2 * lr / 1000}: one value, constant.
            Lr {
                ep: 38.0,
                to: Some(50.0),
                start: 2.0 / 1000.0,
                end: 2.0 / 1000.0,
            },
        ],
    },
];

/// Machine counts with a schedule.
pub const MACHINES: &[&str] = &["1", "4", "8", "16"];

/// One schedule as a plan reads it.
pub struct Phases {
    /// The schedule's own `lr`.
    pub lr: f64,
    /// `tot_epochs`: the largest epoch an lr phase names.
    pub epochs: f64,
    /// (first epoch, global batch).
    pub batches: Vec<(usize, usize)>,
    pub stream: Vec<StreamPhase>,
    pub lr_phases: Vec<LrPhase>,
}

/// Validation at side `sz`: `Resize(int(sz * 1.14))` then `CenterCrop(sz)`
/// (`dataloader.py`), a centre crop of sz / int(sz·1.14) of the short side.
fn eval_ratio(sz: usize) -> f64 {
    sz as f64 / (sz as f64 * 1.14).floor()
}

/// How a schedule is shrunk for a rehearsal: sides, global batches and
/// epochs multiplied (all 1: the schedule as published).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub side: f64,
    pub batch: f64,
    pub epochs: f64,
}

impl Scale {
    pub const PUBLISHED: Scale = Scale {
        side: 1.0,
        batch: 1.0,
        epochs: 1.0,
    };
}

/// The schedule of `machines` machines of 8 GPUs, shrunk by `k`.
pub fn phases(machines: usize, k: Scale) -> Option<Phases> {
    let s = SCHEDULES.iter().find(|s| s.machines == machines)?;
    let gpus = 8 * s.machines;
    let side = |sz: usize| ((sz as f64 * k.side).round() as usize).max(8);
    // Phases start at whole epochs, as the reference's do, also shrunk.
    let epoch = |e: usize| (e as f64 * k.epochs).round() as usize;
    let epoch_f = |e: f64| (e * k.epochs).round();
    let mut stream: Vec<StreamPhase> = Vec::new();
    for d in s.data {
        let prev = stream.last().cloned();
        let phase = match (d.sz, prev) {
            (Some(sz), _) => StreamPhase {
                from: epoch(d.ep),
                size: side(sz),
                min_scale: Some(d.min_scale),
                eval_size: side(sz),
                eval_ratio: eval_ratio(sz),
                rect_val: d.rect_val,
            },
            // keep_dl: the same loader, another batch.
            (None, Some(p)) => StreamPhase {
                from: epoch(d.ep),
                ..p
            },
            (None, None) => return None,
        };
        stream.push(phase);
    }
    let lr_phases: Vec<LrPhase> = s
        .lr_phases
        .iter()
        .map(|p| LrPhase {
            from: epoch_f(p.ep),
            to: match p.to {
                // A ramp (at least an epoch long); one value over a range
                // of epochs is constant.
                Some(to) if p.start != p.end => epoch_f(to).max(epoch_f(p.ep) + 1.0),
                _ => epoch_f(p.ep),
            },
            start: p.start,
            end: p.end,
        })
        .collect();
    let epochs = s
        .lr_phases
        .iter()
        .map(|p| p.to.unwrap_or(p.ep))
        .fold(0.0, f64::max)
        * k.epochs;
    let batch = |bs: usize| (((bs * gpus) as f64 * k.batch).round() as usize).max(1);
    Some(Phases {
        lr: s.lr,
        epochs,
        batches: s.data.iter().map(|d| (epoch(d.ep), batch(d.bs))).collect(),
        stream,
        lr_phases,
    })
}
