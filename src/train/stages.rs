//! Where a run's step seconds go (issue 48, item 4): each training step
//! marks the end of its stages (the batch, the forward, the backward, the
//! optimiser), and the time between marks is summed per stage. On a GPU
//! the marks are CUDA events recorded on the stream, read once per epoch
//! after the boundary's synchronisation, so the steps stay free of host
//! syncs; on a CPU, where every op finishes before the next starts, they
//! are host clock readings. With CUDA graphs the forward and backward are
//! one replay, with no mark between them: only their sum is known.

use crate::events::StageSeconds;
use crate::native::cuda::Event;
use std::cell::RefCell;
use std::time::Instant;
use tch::Device;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    Data,
    Forward,
    /// The backward, or forward and backward together when no forward
    /// mark came between them (a graph's replay).
    Backward,
    Optimiser,
}

enum Mark {
    /// An index into `Marks::events`.
    Cuda(usize),
    Host(Instant),
}

#[derive(Default)]
struct Marks {
    /// The epoch's marks in order, the first its start.
    marks: Vec<(Option<Stage>, Mark)>,
    /// CUDA events, each re-recorded epoch after epoch: the steps create
    /// none after the first epoch's.
    events: Vec<Event>,
    data: f64,
    forward: f64,
    backward: f64,
    optimiser: f64,
    /// Whether any step marked its forward, and whether any did not (a
    /// graph's steps, or a run whose graphs gave up part-way): forward and
    /// backward apart only when every step marked it.
    split: bool,
    unsplit: bool,
    /// Why the stages could not be timed, if they could not.
    broken: Option<String>,
}

/// The run's stage clock.
pub(super) struct StageClock {
    cuda: Option<usize>,
    inner: RefCell<Marks>,
}

impl StageClock {
    pub fn new(device: Device) -> StageClock {
        let cuda = match device {
            Device::Cuda(i) if crate::native::cuda::built() => Some(i),
            _ => None,
        };
        StageClock {
            cuda,
            inner: RefCell::new(Marks::default()),
        }
    }

    /// The start of an epoch's steps.
    pub fn begin(&self) {
        self.push(None);
    }

    /// The end of `stage` in the current step.
    pub fn mark(&self, stage: Stage) {
        self.push(Some(stage));
    }

    fn push(&self, stage: Option<Stage>) {
        let mut m = self.inner.borrow_mut();
        if m.broken.is_some() {
            return;
        }
        let mark = match self.cuda {
            Some(device) => {
                let i = m.marks.len();
                if i == m.events.len() {
                    match Event::new(device) {
                        Ok(e) => m.events.push(e),
                        Err(e) => {
                            m.broken = Some(e.to_string());
                            return;
                        }
                    }
                }
                if let Err(e) = m.events[i].record() {
                    m.broken = Some(e.to_string());
                    return;
                }
                Mark::Cuda(i)
            }
            None => Mark::Host(Instant::now()),
        };
        m.marks.push((stage, mark));
    }

    /// Sums the epoch's marks into the stages; the device must have
    /// finished them (the epoch's boundary synchronised it).
    pub fn settle(&self) {
        let mut m = self.inner.borrow_mut();
        // Taken and handed back cleared: its capacity serves the next epoch.
        let mut marks = std::mem::take(&mut m.marks);
        let count = |s: Stage| marks.iter().filter(|(k, _)| *k == Some(s)).count();
        if count(Stage::Forward) < count(Stage::Backward) {
            m.unsplit = true;
        }
        for pair in marks.windows(2) {
            let ((_, a), (stage, b)) = (&pair[0], &pair[1]);
            let secs = match (a, b) {
                (Mark::Cuda(a), Mark::Cuda(b)) => match m.events[*a].seconds_to(&m.events[*b]) {
                    Ok(s) => s,
                    Err(e) => {
                        m.broken = Some(e.to_string());
                        return;
                    }
                },
                (Mark::Host(a), Mark::Host(b)) => b.duration_since(*a).as_secs_f64(),
                _ => 0.0,
            };
            match stage {
                Some(Stage::Data) => m.data += secs,
                Some(Stage::Forward) => {
                    m.forward += secs;
                    m.split = true;
                }
                Some(Stage::Backward) => m.backward += secs,
                Some(Stage::Optimiser) => m.optimiser += secs,
                None => {}
            }
        }
        marks.clear();
        m.marks = marks;
    }

    /// The run's stage seconds, with the evaluation's from its clock.
    pub fn seconds(&self, eval_s: f64) -> StageSeconds {
        let m = self.inner.borrow();
        let timed_by = match (&m.broken, self.cuda) {
            (Some(why), _) => format!("untimed: {why}"),
            (None, Some(_)) => "cuda events".into(),
            (None, None) => "host clock".into(),
        };
        StageSeconds {
            data_s: m.data,
            forward_s: (m.split && !m.unsplit).then_some(m.forward),
            backward_s: (m.split && !m.unsplit).then_some(m.backward),
            forward_backward_s: m.forward + m.backward,
            optimiser_s: m.optimiser,
            eval_s,
            timed_by,
        }
    }
}
