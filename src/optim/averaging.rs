//! Weight averaging as the plan decides it (Page's EMA, airbench's and
//! hlb's Lookahead) and what the average does after each step: a state
//! machine over step counts, no tensors (`Ema` holds those).

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Averaging {
    None,
    /// Page: an eval-only copy from the initial weights, `decay` applied
    /// after every `every`-th step of each epoch, counting from its first
    /// (new_dawn.py builds a fresh `update_ema` step per epoch).
    PageEma {
        decay: f64,
        every: u64,
    },
    /// airbench: from the initial weights, every `every` steps average with
    /// 0.95⁵·(t/T)³ and copy back, and at the end copy the average in (d = 1).
    /// hlb: from epoch `start` on, the first due step snapshots the live net
    /// and the later ones average and copy back; a separate copy holding
    /// the average is evaluated.
    Lookahead {
        every: u64,
        start: AvgStart,
        eval_average: bool,
    },
}

/// Where Lookahead's average starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AvgStart {
    /// From the initial weights, before the first step (airbench).
    Init,
    /// From a snapshot at the first due step of this epoch (hlb).
    Epoch(f64),
}

/// What the average does after a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AvgAction {
    Skip,
    /// Start the average from the live weights.
    Snapshot,
    /// avg ← decay·avg + (1 − decay)·live, then live ← avg when `copy_back`.
    Update {
        decay: f64,
        copy_back: bool,
    },
}

impl Averaging {
    /// Whether the average exists before the first step (else a `Snapshot` starts it).
    pub fn starts_at_init(&self) -> bool {
        match self {
            Averaging::None => false,
            Averaging::PageEma { .. } => true,
            Averaging::Lookahead { start, .. } => *start == AvgStart::Init,
        }
    }

    /// The action after 1-based step `t` of `total`, the `i`-th (0-based)
    /// step of epoch `epoch`, given whether the average has started.
    pub fn action(&self, t: u64, i: u64, epoch: usize, total: u64, started: bool) -> AvgAction {
        match *self {
            Averaging::None => AvgAction::Skip,
            Averaging::PageEma { decay, every } if i.is_multiple_of(every.max(1)) => {
                AvgAction::Update {
                    decay,
                    copy_back: false,
                }
            }
            Averaging::Lookahead { every, start, .. }
                if t.is_multiple_of(every.max(1))
                    && match start {
                        AvgStart::Init => true,
                        AvgStart::Epoch(e) => epoch as f64 >= e,
                    } =>
            {
                if started {
                    AvgAction::Update {
                        decay: crate::optim::lookahead_decay(t as usize, total as usize),
                        copy_back: true,
                    }
                } else {
                    AvgAction::Snapshot
                }
            }
            _ => AvgAction::Skip,
        }
    }

    /// What the average does once the last step is done: airbench's lookahead
    /// copies it into the net once more (d = 1); the others evaluate as they are.
    pub fn at_end(&self) -> Option<AvgAction> {
        match self {
            Averaging::Lookahead {
                eval_average: false,
                ..
            } => Some(AvgAction::Update {
                decay: 1.0,
                copy_back: true,
            }),
            _ => None,
        }
    }

    /// Every action of a run, as (1-based step, action), the end's included:
    /// what the engine does, for the golden tests (no tensors).
    pub fn schedule(&self, total: u64, per_epoch: u64) -> Vec<(u64, AvgAction)> {
        let mut started = self.starts_at_init();
        let mut out = Vec::new();
        for t in 1..=total {
            let (epoch, i) = ((t - 1) / per_epoch.max(1), (t - 1) % per_epoch.max(1));
            let a = self.action(t, i, epoch as usize, total, started);
            if a != AvgAction::Skip {
                started = true;
                out.push((t, a));
            }
        }
        if let (Some(a), true) = (self.at_end(), started) {
            out.push((total, a));
        }
        out
    }
}
